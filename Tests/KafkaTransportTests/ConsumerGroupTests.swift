import KafkaMessages
import KafkaTransport
import Logging
import Synchronization
import Testing

/// The consumer on librdkafka's mock cluster (a producer's `test.mock.num.brokers`, which other
/// clients reach by its bootstrap servers): polling, manual commits that the group's next member
/// resumes from, and a rebalance between two members.
@Suite(.timeLimit(.minutes(2)))
struct ConsumerGroupTests {
    /// A mock cluster with `topic` of `partitions`, its producer running while `body` runs.
    static func withCluster<Result: Sendable>(
        topic: String,
        partitions: Int,
        _ body: (_ producer: KafkaProducer, _ servers: String) async throws -> Result
    ) async throws -> Result {
        let producer = try KafkaProducer(
            configuration: KafkaConfiguration(bootstrapServers: "", properties: ["test.mock.num.brokers": "1"]),
            logger: Logger(label: "test.producer")
        )
        try producer.createMockTopic(topic, partitions: partitions)
        let servers = try #require(producer.mockClusterBootstrapServers)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            defer { group.cancelAll() }
            return try await body(producer, servers)
        }
    }

    static func consumer(_ servers: String, group: String, topic: String, seedingFrom seedGroup: String? = nil) throws -> KafkaConsumer {
        try KafkaConsumer(
            configuration: KafkaConfiguration(
                bootstrapServers: servers,
                properties: ["session.timeout.ms": "6000", "heartbeat.interval.ms": "500"]
            ),
            groupID: group,
            topics: [topic],
            seedingOffsetsFrom: seedGroup,
            logger: Logger(label: "test.consumer")
        )
    }

    static func records(_ range: Range<Int>, topic: String) -> [KafkaOutgoingMessage] {
        range.map { KafkaOutgoingMessage(topic: topic, key: Array("k\($0)".utf8), value: Array("v\($0)".utf8)) }
    }

    /// Polls until `count` messages arrived in all (or the suite's time limit).
    static func poll(_ consumer: KafkaConsumer, until count: Int) async throws -> [KafkaMessage] {
        var messages: [KafkaMessage] = []
        while messages.count < count {
            messages += try await consumer.poll(maxMessages: 100, timeout: .milliseconds(100))
        }
        return messages
    }

    /// Runs `body` with `consumer` a member of its group, then leaves the group.
    static func withMember<Result: Sendable>(_ consumer: KafkaConsumer, _ body: () async throws -> Result) async throws -> Result {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await consumer.run() }
            defer { group.cancelAll() }
            return try await body()
        }
    }

    /// For each partition, the offset after its last message in `messages`.
    static func nextOffsets(_ messages: [KafkaMessage]) -> [KafkaTopicPartition: Int64] {
        Dictionary(messages.map { ($0.topicPartition, $0.offset + 1) }, uniquingKeysWith: max)
    }

    @Test func aMemberResumesFromTheCommittedOffsetsAndReadsWhatWasNotCommittedAgain() async throws {
        try await Self.withCluster(topic: "orders", partitions: 2) { producer, servers in
            #expect(await producer.send(Self.records(0..<20, topic: "orders")).allSatisfy { $0 == nil })
            let first = try Self.consumer(servers, group: "g1", topic: "orders")
            let read = try await Self.withMember(first) {
                let read = try await Self.poll(first, until: 20)
                // Commit only the first half of each partition: the rest was not finished.
                let half = Dictionary(grouping: read, by: \.topicPartition).values.flatMap { $0.sorted { $0.offset < $1.offset }.prefix($0.count / 2) }
                try await first.commit(Self.nextOffsets(Array(half)))
                return read
            }
            #expect(Set(read.compactMap(\.value).map { String(decoding: $0, as: UTF8.self) }) == Set((0..<20).map { "v\($0)" }))

            let second = try Self.consumer(servers, group: "g1", topic: "orders")
            let again = try await Self.withMember(second) {
                let again = try await Self.poll(second, until: 10)
                // Nothing beyond the uncommitted half comes.
                let more = try await second.poll(maxMessages: 100, timeout: .milliseconds(500))
                return again + more
            }
            let committed = Dictionary(grouping: read, by: \.topicPartition).mapValues { $0.count / 2 }
            #expect(again.count == 10, "the uncommitted half, once: \(again.map { "\($0.partition):\($0.offset)" })")
            #expect(again.allSatisfy { $0.offset >= Int64(committed[$0.topicPartition] ?? 0) }, "nothing below a committed offset")
        }
    }

    /// An upgrade that moves a topic to a group of its own: the new group starts each partition
    /// it has no offset for where the old group committed, not at the topic's beginning, and a
    /// partition it committed itself where it committed.
    @Test func aNewGroupStartsWhereTheGroupBeforeItCommitted() async throws {
        try await Self.withCluster(topic: "campaign", partitions: 2) { producer, servers in
            #expect(await producer.send(Self.records(0..<20, topic: "campaign")).allSatisfy { $0 == nil })
            let before = try Self.consumer(servers, group: "herald", topic: "campaign")
            let oldOffsets = try await Self.withMember(before) {
                let read = try await Self.poll(before, until: 20)
                let half = Dictionary(grouping: read, by: \.topicPartition).values.flatMap { $0.sorted { $0.offset < $1.offset }.prefix($0.count / 2) }
                try await before.commit(Self.nextOffsets(Array(half)))
                return Self.nextOffsets(Array(half))
            }
            let after = try Self.consumer(servers, group: "herald.bulk", topic: "campaign", seedingFrom: "herald")
            let read = try await Self.withMember(after) {
                let read = try await Self.poll(after, until: 10)
                let more = try await after.poll(maxMessages: 100, timeout: .milliseconds(500))
                // The new group's own commit: one record further on partition 0.
                let first = KafkaTopicPartition(topic: "campaign", partition: 0)
                try await after.commit([first: oldOffsets[first]! + 1])
                return read + more
            }
            #expect(read.count == 10, "the records the old group had not committed, once: \(read.map { "\($0.partition):\($0.offset)" })")
            #expect(read.allSatisfy { $0.offset >= oldOffsets[$0.topicPartition]! })
            // Its own offset wins over the old group's from then on.
            let again = try Self.consumer(servers, group: "herald.bulk", topic: "campaign", seedingFrom: "herald")
            let second = try await Self.withMember(again) {
                try await Self.poll(again, until: 9) + again.poll(maxMessages: 100, timeout: .milliseconds(500))
            }
            #expect(second.count == 9)
        }
    }

    /// A revocation after a session time-out is a loss: reported and given back, never drained
    /// or committed (its commit would carry a dead generation).
    @Test func aLostAssignmentIsReportedAndGivenBackWithNothingCommitted() {
        #expect(RebalanceStep.steps(for: .revoke, assignmentLost: true) == [.reportLost, .unassign])
        #expect(RebalanceStep.steps(for: .revoke, assignmentLost: false) == [.drainAndCommit, .unassign])
        #expect(RebalanceStep.steps(for: .error, assignmentLost: false) == [.reportLost, .forgetAssignment])
        #expect(RebalanceStep.steps(for: .assign, assignmentLost: false).last == .reportAssigned)
    }

    /// Records the partitions a member is given and loses.
    final class Assignments: KafkaRebalanceListener {
        let assigned = Mutex<Set<KafkaTopicPartition>>([])
        let revokedCount = Atomic(0)

        func partitionsAssigned(_ partitions: [KafkaTopicPartition]) {
            assigned.withLock { $0.formUnion(partitions) }
        }

        func partitionsRevoked(_ partitions: [KafkaTopicPartition]) -> [KafkaTopicPartition: Int64] {
            assigned.withLock { $0.subtract(partitions) }
            revokedCount.add(1, ordering: .relaxed)
            return [:]
        }

        func partitionsLost(_ partitions: [KafkaTopicPartition]) {
            assigned.withLock { $0.subtract(partitions) }
        }
    }

    /// A commit decided before a rebalance and run after it commits only the partitions the
    /// member still holds: the ones it gave up are the new owner's to commit.
    /// The seed's decision, which the pipeline's simulation takes too: only a partition its own
    /// group never committed starts where the earlier group committed, and only when it did.
    @Test func onlyAPartitionTheGroupNeverCommittedStartsWhereTheEarlierGroupCommitted() {
        let (p0, p1, p2) = (
            KafkaTopicPartition(topic: "t", partition: 0), KafkaTopicPartition(topic: "t", partition: 1), KafkaTopicPartition(topic: "t", partition: 2)
        )
        let starts = seededStartOffsets(committed: [p0: 7, p1: -1001, p2: -1001], committedByEarlierGroup: [p0: 3, p1: 5, p2: -1001])
        #expect(starts == [p1: 5])
    }

    @Test func aCommitAfterARebalanceCommitsNothingOfThePartitionsGivenUp() async throws {
        try await Self.withCluster(topic: "alerts", partitions: 4) { producer, servers in
            #expect(await producer.send(Self.records(0..<40, topic: "alerts")).allSatisfy { $0 == nil })
            let first = try Self.consumer(servers, group: "g4", topic: "alerts")
            let firstAssignments = Assignments()
            first.setRebalanceListener(firstAssignments)
            let (held, given) = try await Self.withMember(first) {
                let read = try await Self.poll(first, until: 40)
                let second = try Self.consumer(servers, group: "g4", topic: "alerts")
                let secondAssignments = Assignments()
                second.setRebalanceListener(secondAssignments)
                return try await Self.withMember(second) {
                    while secondAssignments.assigned.withLock({ $0.isEmpty }) || firstAssignments.assigned.withLock({ $0.isEmpty })
                        || firstAssignments.assigned.withLock({ $0.count }) + secondAssignments.assigned.withLock({ $0.count }) != 4
                    {
                        _ = try await first.poll(maxMessages: 10, timeout: .milliseconds(50))
                        _ = try await second.poll(maxMessages: 10, timeout: .milliseconds(50))
                    }
                    // Every partition read to its end, committed after the rebalance.
                    try await first.commit(Self.nextOffsets(read))
                    let held = firstAssignments.assigned.withLock { $0 }
                    return (held, Set(read.map(\.topicPartition)).subtracting(held))
                }
            }
            #expect(!held.isEmpty && !given.isEmpty)
            // A later member reads what the first did not hold, and nothing of what it did.
            let later = try Self.consumer(servers, group: "g4", topic: "alerts")
            let again = try await Self.withMember(later) {
                // Joining takes a few seconds; what it reads comes at once after.
                var again: [KafkaMessage] = []
                let deadline = ContinuousClock.now + .seconds(15)
                while ContinuousClock.now < deadline {
                    let batch = try await later.poll(maxMessages: 100, timeout: .milliseconds(200))
                    if batch.isEmpty, !again.isEmpty { break }
                    again += batch
                }
                return again
            }
            #expect(Set(again.map(\.topicPartition)) == given, "read again: \(Set(again.map(\.topicPartition))), given up: \(given)")
        }
    }

    @Test func aSecondMemberTakesPartitionsFromTheFirstInARebalance() async throws {
        try await Self.withCluster(topic: "events", partitions: 4) { producer, servers in
            let first = try Self.consumer(servers, group: "g2", topic: "events")
            let firstAssignments = Assignments()
            first.setRebalanceListener(firstAssignments)
            try await Self.withMember(first) {
                while firstAssignments.assigned.withLock({ $0.count }) < 4 {
                    _ = try await first.poll(maxMessages: 10, timeout: .milliseconds(100))
                }
                let second = try Self.consumer(servers, group: "g2", topic: "events")
                let secondAssignments = Assignments()
                second.setRebalanceListener(secondAssignments)
                try await Self.withMember(second) {
                    // Both poll: the first must give partitions up, the second join.
                    while firstAssignments.assigned.withLock({ $0.count }) + secondAssignments.assigned.withLock({ $0.count }) != 4
                        || secondAssignments.assigned.withLock({ $0.isEmpty })
                    {
                        _ = try await first.poll(maxMessages: 10, timeout: .milliseconds(50))
                        _ = try await second.poll(maxMessages: 10, timeout: .milliseconds(50))
                    }
                }
                let firstHas = firstAssignments.assigned.withLock { $0 }
                #expect(firstAssignments.revokedCount.load(ordering: .relaxed) >= 1, "the first member gave partitions up")
                #expect(!firstHas.isEmpty && firstHas.count < 4)
            }
        }
    }
}
