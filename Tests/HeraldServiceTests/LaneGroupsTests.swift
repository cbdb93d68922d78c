import HeraldService
import KafkaMessages
import KafkaTransport
import Logging
import Synchronization
import Testing

/// The bulk lane's group of its own, as `herald run` makes its two members
/// (``HeraldApplication/makeConsumers(_:logger:)``), on librdkafka's mock cluster: another member
/// joining HERALD_KAFKA_GROUP (a member joins when it is made) rebalances the instance's urgent
/// member only. Were both
/// lanes one group, the join would revoke the bulk member's partitions too, and the urgent
/// lane's rebalance would wait for the bulk lane's drain (a paced campaign's window).
@Suite(.timeLimit(.minutes(2)))
struct LaneGroupsTests {
    /// The partitions a member holds, and how often it lost some in a revocation.
    final class Held: KafkaRebalanceListener {
        let partitions = Mutex<Set<KafkaTopicPartition>>([])
        let revocations = Atomic(0)

        var count: Int { partitions.withLock { $0.count } }

        func partitionsAssigned(_ assigned: [KafkaTopicPartition]) {
            partitions.withLock { $0.formUnion(assigned) }
        }

        func partitionsRevoked(_ revoked: [KafkaTopicPartition]) -> [KafkaTopicPartition: Int64] {
            partitions.withLock { $0.subtract(revoked) }
            if !revoked.isEmpty { revocations.add(1, ordering: .relaxed) }
            return [:]
        }

        func partitionsLost(_ lost: [KafkaTopicPartition]) {
            partitions.withLock { $0.subtract(lost) }
        }
    }

    @Test func anotherInstancesUrgentMemberJoiningLeavesTheBulkLanesPartitionsAlone() async throws {
        let producer = try KafkaProducer(
            configuration: KafkaConfiguration(bootstrapServers: "", properties: ["test.mock.num.brokers": "1"]),
            logger: Logger(label: "test.producer")
        )
        for (topic, partitions) in [("push.requests", 2), ("push.requests.bulk", 2), ("push.tokens", 1), ("push.channels", 1)] {
            try producer.createMockTopic(topic, partitions: partitions)
        }
        let configuration = try await HeraldConfiguration(environment: [
            "HERALD_KAFKA_BROKERS": try #require(producer.mockClusterBootstrapServers),
            "HERALD_KAFKA_GROUP": "lanes",
            "HERALD_KAFKA_SESSION_TIMEOUT_MS": "6000",
            "HERALD_KAFKA_HEARTBEAT_INTERVAL_MS": "500",
        ])
        let logger = Logger(label: "test.lanes")
        let first = try HeraldApplication.makeConsumers(configuration, logger: logger)
        let (firstUrgent, firstBulk, secondUrgent) = (Held(), Held(), Held())
        first.urgent.setRebalanceListener(firstUrgent)
        first.bulk.setRebalanceListener(firstBulk)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            group.addTask { try await first.urgent.run() }
            group.addTask { try await first.bulk.run() }
            defer { group.cancelAll() }
            while firstUrgent.count < 4 || firstBulk.count < 2 {
                _ = try await first.urgent.poll(maxMessages: 10, timeout: .milliseconds(50))
                _ = try await first.bulk.poll(maxMessages: 10, timeout: .milliseconds(50))
            }
            let second = try KafkaConsumer(
                configuration: configuration.kafka,
                groupID: configuration.consumerGroup,
                topics: ["push.requests"],
                logger: logger
            )
            second.setRebalanceListener(secondUrgent)
            group.addTask { try await second.run() }
            while secondUrgent.count == 0 || firstUrgent.count + secondUrgent.count < 4 {
                _ = try await first.urgent.poll(maxMessages: 10, timeout: .milliseconds(50))
                _ = try await first.bulk.poll(maxMessages: 10, timeout: .milliseconds(50))
                _ = try await second.poll(maxMessages: 10, timeout: .milliseconds(50))
            }
            #expect(firstUrgent.revocations.load(ordering: .relaxed) >= 1, "the urgent lane was rebalanced")
            #expect(firstBulk.revocations.load(ordering: .relaxed) == 0, "the bulk lane was rebalanced with it")
            #expect(firstBulk.count == 2)
        }
    }
}
