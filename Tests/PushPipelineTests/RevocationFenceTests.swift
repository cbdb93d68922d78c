import APNSCore
import PushStores
import Dispatch
import KafkaMessages
import Logging
import PushPipeline
import PushPipelineTesting
import ServiceLifecycle
import ServiceLifecycleTestKit
import Synchronization
import Testing

/// The rebalance fence where the pipeline meets the consumer's rebalance callbacks: no APNs
/// attempt starts for a message once its partition's revocation began, even when the partition
/// comes back to this member before the send wakes, and sends that had not started are given up
/// at once instead of holding the revocation (or a pacer slot, or a permit).
@Suite(.timeLimit(.minutes(1)))
struct RevocationFenceTests {
    static let partition = KafkaTopicPartition(topic: "push.requests", partition: 0)
    static let phone = String(repeating: "c1", count: 32)

    static func request(_ offset: Int64, topic: String = "push.requests") -> KafkaMessage {
        let json = #"{"id":"e\#(offset)","user_ids":["carol"],"topic":"com.example.shop","payload":{"aps":{"alert":"hi"}}}"#
        return KafkaMessage(
            topic: topic, partition: 0, offset: offset, key: nil, value: Array(json.utf8), timestampMilliseconds: 1_795_690_800_000)
    }

    static func store() async throws -> FakeStore {
        let store = FakeStore()
        try await store.apply(
            TokenRegistryUpdate(
                action: .register, userID: "carol", token: phone, topic: "com.example.shop", environment: .production,
                timestamp: Timestamp(millisecondsSince1970: 1_700_000_000_000)))
        return store
    }

    /// Calls the rebalance callback as librdkafka does: on a thread of its own, which it blocks.
    static func revoke(_ partitions: [KafkaTopicPartition], from pipeline: NotificationPipeline) async -> [KafkaTopicPartition: Int64] {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: pipeline.partitionsRevoked(partitions)) }
        }
    }

    /// Runs `pipeline` while `body` runs, then stops it gracefully.
    static func whileRunning(_ pipeline: NotificationPipeline, _ body: @escaping @Sendable () async throws -> Void) async throws {
        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await pipeline.run() }
                try await body()
                trigger.triggerGracefulShutdown()
                try await group.waitForAll()
            }
        }
    }

    static func waitUntil(_ condition: @Sendable () -> Bool) async throws {
        while !condition() { try await Task.sleep(for: .milliseconds(2)) }
    }

    /// Finding 1: a send retrying 429s on this member, its partition revoked (the new owner
    /// pushes the message) and assigned back before the send wakes: the send must stay fenced.
    @Test func aSendInBackoffStaysFencedWhenItsPartitionComesBack() async throws {
        var configuration = PipelineConfiguration()
        configuration.retry = RetryPolicy(maxAttempts: 1_000, initialBackoff: .milliseconds(5), maximumBackoff: .milliseconds(20))
        configuration.revocationDrainTimeout = .milliseconds(200)
        configuration.commitInterval = .milliseconds(10)
        let source = InMemoryMessageSource([Self.request(0)])
        let apns = ScriptedAPNSClient(scripts: [Self.phone: [.status(429, .tooManyRequests)]], afterwards: .repeatLast)
        let store = try await Self.store()
        let pipeline = NotificationPipeline(
            configuration: configuration, source: source, publisher: FakePublisher(), store: store, ledger: store, apns: apns,
            logger: Logger(label: "test"))
        try await Self.whileRunning(pipeline) {
            try await Self.waitUntil { apns.callCount(Self.phone) >= 2 }  // retrying
            let committedOnRevocation = await Self.revoke([Self.partition], from: pipeline)
            pipeline.partitionsAssigned([Self.partition])
            let attemptsAtReassignment = apns.callCount(Self.phone)
            try await Task.sleep(for: .milliseconds(300))
            let committed = committedOnRevocation[Self.partition] ?? source.committed[Self.partition] ?? 0
            #expect(committed == 0, "the unfinished message is the new owner's")
            #expect(apns.callCount(Self.phone) == attemptsAtReassignment, "no attempt after the partition came back")
        }
    }

    /// Findings 2 and 3: a paced campaign's sends that have not started are given up as the
    /// revocation begins: the drain does not wait for them, and they take no further pacer slot.
    @Test func pacedSendsNotStartedAreGivenUpAtOnceOnRevocation() async throws {
        var configuration = PipelineConfiguration()
        configuration.bulkMaxRate = 5  // one send every 200 ms
        configuration.revocationDrainTimeout = .seconds(20)
        configuration.commitInterval = .milliseconds(10)
        let bulkPartition = KafkaTopicPartition(topic: "push.requests.bulk", partition: 0)
        let bulk = InMemoryMessageSource((0..<50).map { Self.request($0, topic: "push.requests.bulk") })
        let apns = ScriptedAPNSClient()
        let store = try await Self.store()
        let pipeline = NotificationPipeline(
            configuration: configuration, source: InMemoryMessageSource(), bulkSource: bulk, publisher: FakePublisher(), store: store,
            ledger: store, apns: apns, logger: Logger(label: "test"))
        try await Self.whileRunning(pipeline) {
            try await Self.waitUntil { apns.callCount(Self.phone) >= 2 }
            let started = ContinuousClock.now
            let committed = await Self.revoke([bulkPartition], from: pipeline)
            let drained = started.duration(to: .now)
            let sentAtRevocation = apns.callCount(Self.phone)
            try await Task.sleep(for: .milliseconds(600))
            #expect(drained < .seconds(5), "the drain waited \(drained) for sends that had not started")
            #expect(apns.callCount(Self.phone) == sentAtRevocation, "a paced send started after the revocation")
            // On revocation, or by the commit before it when nothing moved since.
            #expect(committed[bulkPartition] ?? bulk.committed[bulkPartition] == Int64(sentAtRevocation), "committed up to the first message not sent")
        }
    }
}
