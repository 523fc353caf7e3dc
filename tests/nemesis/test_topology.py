"""The topology over a real proxy process: a 3-controller + 3-broker +
2-client layout in three zones gets the right addresses, and every fault
shape puts exactly the right directed links in the right mode (read back
from the proxy itself)."""

from __future__ import annotations

import json
import random
import re
import socket

import pytest

from jepsen_like.nemesis import ProxyNetwork, UnknownMemberError

CONTROLLERS = {1: "az1", 2: "az2", 3: "az3"}
BROKERS = {4: "az1", 5: "az2", 6: "az3"}
CLIENTS = {"c1": "az1", "c2": "az2"}
OBSERVER = "eye"  # the harness's own view: never cut
NODES = sorted([*CONTROLLERS, *BROKERS])


@pytest.fixture(scope="module")
def network():
    with ProxyNetwork() as net:
        for node_id, zone in CONTROLLERS.items():
            net.add_node(node_id, "controller", zone=zone)
        for node_id, zone in BROKERS.items():
            net.add_node(node_id, "broker", zone=zone)
        for client_id, zone in CLIENTS.items():
            net.add_client(client_id, zone=zone)
        net.add_client(OBSERVER, observer=True)
        yield net


@pytest.fixture
def net(network):
    network.heal()
    yield network
    network.heal()


def all_links() -> set[tuple]:
    """Every directed link the runner needs: node→node, client→node."""
    members = [*NODES, *CLIENTS, OBSERVER]
    return {(src, dst) for src in members for dst in NODES if src != dst}


def expected_modes(cut: set[tuple], refuse: bool = False) -> dict[tuple, str]:
    """Independent of the code under test: link (x, y) carries x→y on a→b
    and y→x on b→a."""
    modes = {}
    for x, y in all_links():
        a_to_b, b_to_a = (x, y) in cut, (y, x) in cut
        modes[(x, y)] = {
            (False, False): "pass",
            (True, True): "refuse" if refuse else "drop",
            (True, False): "one-way-a-to-b",
            (False, True): "one-way-b-to-a",
        }[(a_to_b, b_to_a)]
    return modes


def both_ways(a, b) -> set[tuple]:
    return {pair for x in a for y in b for pair in ((x, y), (y, x)) if isinstance(x, int) or isinstance(y, int)}


def test_layout_gets_one_proxy_link_per_directed_pair(net):
    assert net.nodes() == NODES
    assert net.nodes(role="controller") == [1, 2, 3] and net.nodes(role="broker") == [4, 5, 6]
    assert net.nodes(zone="az1") == [1, 4] and net.clients(zone="az2") == ["c2"] and net.zones() == ["az1", "az2", "az3"]
    assert set(net.links()) == all_links()  # 6*5 node links + 3*6 client links
    assert net.clients() == ["c1", "c2"] and net.observers() == [OBSERVER]
    listen = {node: net.listen_address(node) for node in NODES}
    assert len(set(listen.values())) == len(NODES)
    stats = net.stats()
    ports = set()
    for (src, dst), entry in stats.items():
        host, port = net.address_for(src, dst)
        assert host == net.proxy_host and port == entry["port"]
        assert tuple(entry["target"]) == listen[dst]  # the link leads to dst's own listener
        ports.add(port)
    assert len(ports) == len(all_links())
    assert net.address_for(1, 1) == listen[1]


def test_voters_maps_and_bootstrap_lists_use_each_sources_own_links(net):
    voters_4 = net.voters_arg(4)
    entries = dict(entry.split("@") for entry in voters_4.split(","))
    assert sorted(map(int, entries)) == [1, 2, 3]
    for voter in (1, 2, 3):
        assert entries[str(voter)] == "%s:%d" % net.address_for(4, voter)
    own = dict(entry.split("@") for entry in net.voters_arg(2).split(","))
    assert own["2"] == "%s:%d" % net.listen_address(2)  # a voter lists itself at its listen address
    assert net.bootstrap_for("c1", [1, 2]) == ["1@%s:%d" % net.address_for("c1", 1), "2@%s:%d" % net.address_for("c1", 2)]
    assert re.fullmatch(r"(\d@127\.0\.0\.2:\d+,){2}\d@127\.0\.0\.2:\d+", voters_4)


def test_bad_member_ids_are_refused(net):
    with pytest.raises(UnknownMemberError):
        net.address_for(9, 1)
    with pytest.raises(ValueError, match="not a node"):
        net.address_for(1, "c1")
    with pytest.raises(ValueError, match="already added"):
        net.add_node(1)
    with pytest.raises(ValueError, match="ints"):
        net.add_node("1")
    with pytest.raises(ValueError, match="strings"):
        net.add_client(7)
    with pytest.raises(ValueError, match="both sides"):
        net.split([1, 2], [2, 3])
    with pytest.raises(ValueError, match="zone"):
        net.isolate_zone("az9")
    assert net.active_faults() == []


def test_isolate_cuts_a_node_from_every_other_node_but_not_its_clients(net):
    fault = net.isolate(1)
    cut = both_ways([1], [2, 3, 4, 5, 6])
    assert set(fault.cut) == cut
    assert net.link_modes() == expected_modes(cut)
    assert net.active_faults() == [fault]


def test_isolate_with_clients_cuts_the_clients_too(net):
    fault = net.isolate(1, clients=True)
    cut = both_ways([1], [2, 3, 4, 5, 6, "c1", "c2"])
    assert set(fault.cut) == cut
    assert net.link_modes() == expected_modes(cut)


def test_split_cuts_exactly_between_the_sides(net):
    fault = net.split([1, 4, "c1"], [2, 3, 5, 6])
    cut = both_ways([1, 4, "c1"], [2, 3, 5, 6])
    assert set(fault.cut) == cut
    assert net.link_modes() == expected_modes(cut)  # c2 still reaches everyone


def test_refuse_puts_the_links_in_refuse(net):
    net.split([1], [2, 3], how="refuse")
    assert net.link_modes() == expected_modes(both_ways([1], [2, 3]), refuse=True)


def test_random_halves_split_the_controllers_into_minority_and_majority(net):
    fault = net.split_random_halves(random.Random(7))
    minority, majority = fault.params["minority"], fault.params["majority"]
    assert sorted(minority + majority) == NODES
    assert len([n for n in minority if n in CONTROLLERS]) == 1 and len([n for n in majority if n in CONTROLLERS]) == 2
    assert net.link_modes() == expected_modes(both_ways(minority, majority))
    net.heal()
    again = net.split_random_halves(random.Random(7))
    assert again.params == fault.params  # same rng, same halves


def test_bridge_leaves_the_middle_seeing_both_halves(net):
    fault = net.bridge([1, 4], 2, [3, 6])
    cut = both_ways([1, 4], [3, 6])
    assert set(fault.cut) == cut
    modes = net.link_modes()
    assert modes == expected_modes(cut)
    assert all(modes[(2, other)] == "pass" and modes[(other, 2)] == "pass" for other in (1, 3, 4, 6))
    net.heal()
    drawn = net.bridge_random(random.Random(3))
    assert len(drawn.params["middle"]) == 1 and drawn.params["middle"][0] in CONTROLLERS


def test_cut_one_way_cuts_one_direction_on_both_connections(net):
    fault = net.cut_one_way(1, 2)
    assert fault.cut == ((1, 2),)
    modes = net.link_modes()
    assert modes == expected_modes({(1, 2)})
    # what 1 sends on its own connection to 2, and what it answers on 2's
    assert modes[(1, 2)] == "one-way-a-to-b" and modes[(2, 1)] == "one-way-b-to-a"


def test_isolate_from_cuts_a_broker_from_the_controllers_only(net):
    fault = net.isolate_from(4, net.nodes(role="controller"))  # seed 003 case 2
    cut = both_ways([4], [1, 2, 3])
    assert set(fault.cut) == cut
    modes = net.link_modes()
    assert modes == expected_modes(cut)
    assert modes[("c1", 4)] == modes[("c2", 4)] == modes[(4, 5)] == "pass"


def test_isolate_zone_takes_a_controller_a_broker_and_their_clients(net):
    fault = net.isolate_zone("az1")  # seed 003 cases 3 and 4
    cut = both_ways([1, 4, "c1"], [2, 3, 5, 6, "c2"])
    assert set(fault.cut) == cut
    assert net.link_modes() == expected_modes(cut)


def test_isolate_zone_without_clients_leaves_every_client_connected(net):
    fault = net.isolate_zone("az1", clients=False)
    cut = both_ways([1, 4], [2, 3, 5, 6])
    assert set(fault.cut) == cut
    assert net.link_modes() == expected_modes(cut)


def test_faults_stack_and_heal_one_at_a_time_or_all(net):
    first = net.cut_one_way(1, 2)
    second = net.cut_one_way(2, 1)
    assert net.link_modes()[(1, 2)] == "drop"
    healed = net.heal(first)
    assert healed.params == {"healed": [first.fault_id]}
    assert net.active_faults() == [second]
    assert net.link_modes() == expected_modes({(2, 1)})
    net.heal()
    assert net.active_faults() == [] and set(net.link_modes().values()) == {"pass"}


def test_delay_is_directed_and_reaches_both_connections(net):
    fault = net.set_delay(1, 2, 80, 10)
    stats = net.stats()
    assert stats[(1, 2)]["delay_a_to_b_ms"] == [80, 10] and stats[(1, 2)]["delay_b_to_a_ms"] == [0, 0]
    assert stats[(2, 1)]["delay_b_to_a_ms"] == [80, 10] and stats[(2, 1)]["delay_a_to_b_ms"] == [0, 0]
    assert set(net.link_modes().values()) == {"pass"}
    assert fault.as_history_value()["delays"] == [[1, 2, 80.0, 10.0]]
    net.heal()
    assert net.stats()[(1, 2)]["delay_a_to_b_ms"] == [0, 0]


def test_every_fault_describes_itself_for_the_history(net):
    fault = net.isolate_zone("az2", how="refuse")
    value = fault.as_history_value()
    assert json.loads(json.dumps(value)) == value
    assert value["shape"] == "isolate-zone" and value["zone"] == "az2" and value["how"] == "refuse"
    assert value["backend"] == "proxy" and [2, 1] in value["cut"]
    assert "isolate-zone" in fault.describe()
    assert net.heal().as_history_value()["healed"] == [fault.fault_id]


def test_bytes_really_stop_on_an_isolated_link(net):
    host, port = net.listen_address(2)
    with socket.create_server((host, port)) as node_2:
        with socket.create_connection(net.address_for(1, 2), timeout=5) as link:
            link.sendall(b"before")
            accepted, _ = node_2.accept()
            with accepted:
                accepted.settimeout(5)
                assert accepted.recv(100) == b"before"
                net.isolate(2)
                link.sendall(b"during")
                accepted.settimeout(0.3)
                with pytest.raises(TimeoutError):
                    accepted.recv(100)
                net.heal()
                accepted.settimeout(5)
                assert accepted.recv(100) == b"during"


def test_observers_are_never_cut(net):
    with pytest.raises(ValueError, match="observer"):
        net.isolate_from(1, [OBSERVER])
    with pytest.raises(ValueError, match="observer"):
        net.set_delay(OBSERVER, 1, 10)
    net.isolate_zone("az1")
    net.isolate(2, clients=True)
    modes = net.link_modes()
    assert all(modes[(OBSERVER, node)] == "pass" for node in NODES)


def _accept_one(server: socket.socket, timeout_s: float) -> bytes | None:
    """The first bytes of the first connection ``server`` gets, or None."""
    server.settimeout(timeout_s)
    try:
        conn, _ = server.accept()
    except TimeoutError:
        return None
    with conn:
        conn.settimeout(timeout_s)
        try:
            return conn.recv(64)
        except TimeoutError:
            return None


def test_a_port_per_source_lets_each_member_reach_a_node_on_its_own_cuttable_listener():
    """With per-source listeners (what the Kafka target advertises), each
    member's link to a node of that role ends at a port of the node's own
    for that member; nodes of other roles keep their one listen address;
    a cut of one member's link leaves the others' alone."""
    with ProxyNetwork(per_source_listener_roles=("broker",)) as net:
        net.add_node(1, "controller", zone="az1")
        net.add_node(101, "broker", zone="az1")
        net.add_client("c1")
        net.add_client("c2")
        ports = {src: net.source_listen_address(101, src) for src in (1, "c1", "c2")}
        assert len(set(ports.values()) | {net.listen_address(101)}) == 4, "one port per source, apart from the listen address"
        with pytest.raises(KeyError):
            net.source_listen_address(1, "c1")  # controllers are not in the roles
        servers = {}
        try:
            for src, address in ports.items():
                server = socket.socket()
                server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                server.bind(address)
                server.listen()
                servers[src] = server
            fault = net.isolate_from(101, ["c1"])
            for src in ("c1", "c2"):
                with socket.create_connection(net.address_for(src, 101), timeout=5) as conn:
                    conn.sendall(f"from {src}".encode())
                    received = _accept_one(servers[src], timeout_s=1.0 if src == "c1" else 5.0)
                    assert received == (None if src == "c1" else b"from c2"), (src, received)
            net.heal(fault)
            with socket.create_connection(net.address_for("c1", 101), timeout=5) as conn:
                conn.sendall(b"from c1")
                assert _accept_one(servers["c1"], timeout_s=5.0) == b"from c1"
        finally:
            for server in servers.values():
                server.close()
