"""A replicated dictionary: writes from any node, the three read modes,
errors contained, and state restored from a snapshot after a restart.

    python examples/replicated_dict.py [VOTERS]    # default 1@127.0.0.1:9191,2@...:9192,3@...:9193
"""

import sys
import tempfile
import time

from quorum import ApplyFailedError, NotLeaderError
from quorum.replicated import Replicated, query, replicated


class Dictionary(Replicated):
    """A dict of string keys. Its public attributes (``items``) are what a
    snapshot holds; ``snapshot_state``/``restore_state`` could say otherwise."""

    def __init__(self):
        self.items = {}

    @replicated
    def set(self, key, value):
        self.items[key] = value

    @replicated
    def compare_and_set(self, key, expected, new):
        if self.items.get(key) != expected:
            return False
        self.items[key] = new
        return True

    @replicated
    def pop(self, key):
        return self.items.pop(key)  # KeyError for a missing key: that call fails, everywhere alike

    @query
    def get(self, key):
        return self.items.get(key)


def main(voters: str, base_dir: str) -> None:
    nodes = {
        # A snapshot every 4 records (default 10,000), to show a restart from one.
        node_id: Dictionary().start(
            node_id=node_id, voters=voters, data_dir=f"{base_dir}/node{node_id}", snapshot_every_records=4, plaintext=True
        )
        for node_id in (1, 2, 3)
    }
    leader_id = nodes[1].wait_for_leader(timeout_s=30)
    follower_id = next(node_id for node_id in nodes if node_id != leader_id)
    follower = nodes[follower_id]

    follower.set("color", "blue")  # from a follower: forwarded to the leader
    print("compare_and_set blue -> green:", follower.compare_and_set("color", "blue", "green"))
    print("compare_and_set blue -> red:", follower.compare_and_set("color", "blue", "red"))
    try:
        follower.pop("size")
    except ApplyFailedError as error:
        print("pop of a missing key failed on every replica alike:", error.description)
    try:
        follower.set("shape", {"round"})
    except TypeError:
        print("a set cannot be encoded: TypeError in the caller, nothing proposed")

    print("linearizable read on a follower:", follower.get("color"))
    follower.close()
    strict = Dictionary().start(
        node_id=follower_id,
        voters=voters,
        data_dir=f"{base_dir}/node{follower_id}",
        forward=False,
        read="follower",
        plaintext=True,
    )
    nodes[follower_id] = strict
    strict.wait_for_leader(timeout_s=30)
    try:
        strict.set("color", "red")
    except NotLeaderError as error:
        print(f"with forward=False a follower refuses: NotLeaderError, leader hint {error.leader_id}")
    nodes[leader_id].set("size", 3)
    deadline = time.monotonic() + 30
    while strict.get("size") != 3 and time.monotonic() < deadline:
        time.sleep(0.01)  # read="follower": this node's own copy, as fresh as its last fetch
    print("follower read after its restart:", strict.get("color"), strict.get("size"))
    for node in nodes.values():
        node.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="pykraft-dict-") as base_dir:
        main(sys.argv[1] if len(sys.argv) > 1 else "1@127.0.0.1:9191,2@127.0.0.1:9192,3@127.0.0.1:9193", base_dir)
