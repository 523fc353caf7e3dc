"""A counter replicated over three voters, in about ten lines of your own.

The three nodes run in this one process here (each on a thread of its own,
talking over loopback TCP as three processes would); for three processes,
run the same class with ``start(node_id=N, voters=VOTERS, ...)`` in each.
``plaintext=True`` chooses no TLS, for a quick start on loopback; a real
cluster gives each node ``tls=TlsConfig(...)`` instead (docs/security.md).

    python examples/replicated_counter.py [VOTERS]    # default 1@127.0.0.1:9091,2@...:9092,3@...:9093
"""

import sys

from quorum.replicated import Replicated, query, replicated


class Counter(Replicated):
    def __init__(self):
        self.total = 0

    @replicated
    def add(self, n):
        self.total += n
        return self.total

    @query
    def value(self):
        return self.total


VOTERS = sys.argv[1] if len(sys.argv) > 1 else "1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093"
nodes = [Counter().start(node_id=node_id, voters=VOTERS, plaintext=True) for node_id in (1, 2, 3)]
print("node 3 adds 5, total", nodes[2].add(5))  # forwarded to the leader when node 3 follows
print("node 1 adds 2, total", nodes[0].add(2))
print("node 2 reads", nodes[1].value())  # linearizable: sees both adds
for node in nodes:
    node.close()
