"""Kafka 4.4's log lines (the adapter's pattern: wall-clock ms first) as
the checker's node events, on lines copied from a campaign's logs. No
Kafka needed."""

from __future__ import annotations

from jepsen_like.campaign._kafka_target import kafka_node_events

START_NS = 1_795_640_480_000 * 1_000_000

LOG = """\
1795640482001 [21:01:22,001] INFO [RaftManager id=3] Completed transition to CandidateState(localId=3, localDirectoryId=qRc4sTk78A0Ovh67KEP1CA, epoch=1, epochElection=EpochElection[voterStates={}], highWatermark=Optional.empty, electionTimeoutMs=1224) from ProspectiveState(epoch=0) (org.apache.kafka.raft.QuorumState)
1795640482889 [21:01:22,889] INFO [RaftManager id=3] Completed transition to Leader(localVoterNode=VoterNode(voterKey=ReplicaKey(id=3, directoryId=qRc4sTk78A0Ovh67KEP1CA), listeners=Endpoints(endpoints={}), supportedKRaftVersion=SupportedVersionRange[min_version:0, max_version:1]), epoch=1, epochStartOffset=0, highWatermark=Optional.empty, voterStates={}) from CandidateState(localId=3, epoch=1) (org.apache.kafka.raft.QuorumState)
1795640487215 [21:01:27,215] INFO [QuorumController id=3] Replayed BrokerRegistrationChangeRecord modifying the registration for broker 102: BrokerRegistrationChangeRecord(brokerId=102, brokerEpoch=16, fenced=1, inControlledShutdown=0, logDirs=[], cordonedLogDirs=null) (org.apache.kafka.controller.ClusterControlManager)
1795640494496 [21:01:34,496] INFO [RaftManager id=3] Did not receive fetch request from the majority of the voters within 3000ms. Current fetched voters are [], and voters are [] (org.apache.kafka.raft.LeaderState)
1795640494519 [21:01:34,519] INFO [RaftManager id=3] Completed transition to ResignedState(localId=3, epoch=1, voters=[1, 2, 3], electionTimeoutMs=1367, unackedVoters=[1, 2], preferredSuccessors=[]) from Leader(epoch=1) (org.apache.kafka.raft.QuorumState)
a line cut off by kill -9 Completed transition to
1795640504700 [21:01:44,700] INFO [RaftManager id=3] Completed transition to FollowerState(fetchTimeoutMs=2000, epoch=2, leader=1, leaderEndpoints=Endpoints(endpoints={ListenerName(NODE3)=127.0.0.2/<unresolved>:40001}), votedKey=Optional.empty, voters=[1, 2, 3], highWatermark=Optional.empty, fetchingSnapshot=Optional.empty) from UnattachedState(epoch=2, leaderId=OptionalInt.empty) (org.apache.kafka.raft.QuorumState)
"""


def test_kafka_log_lines_become_role_and_fence_events_on_the_history_clock():
    events = kafka_node_events(LOG, 3, START_NS)
    summary = [(e["time"] // 1_000_000, e["kind"], e.get("role") or e.get("state"), e.get("epoch"), e.get("leader")) for e in events]
    assert summary == [
        (2001, "role", "candidate", 1, None),
        # "Leader(...)" has no "State" suffix in Kafka 4.4.
        (2889, "role", "leader", 1, "3"),
        (7215, "controller_broker_state", "fenced", None, None),
        (14519, "role", "resigned", 1, None),
        (24700, "role", "follower", 2, "1"),
    ]
    resigned = events[3]
    assert resigned["reason"] == "kafka: check quorum: no Fetch from a majority of the voters within 3000 ms"
    assert events[2]["broker_id"] == "102" and events[2]["broker_epoch"] == 16
    # Only the resignation right after the check-quorum line carries it.
    assert events[4]["reason"] == "kafka: FollowerState"
