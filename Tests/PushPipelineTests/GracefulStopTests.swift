import APNSCore
import KafkaMessages
import Logging
import PushPipeline
import PushPipelineTesting
import ServiceLifecycle
import ServiceLifecycleTestKit
import Testing

/// A graceful stop during a paced campaign: the bulk lane's sends that have not started are given
/// up at once (their messages stay uncommitted, so the next owner sends them, once), and neither
/// lane waits for the pace.
@Suite(.timeLimit(.minutes(1)))
struct GracefulStopTests {
    /// Issue 48, finding 4: on today's code the stop waited for the paced window to finish
    /// (50 messages at 5/s: about 10 s), holding the urgent lane's partitions meanwhile.
    @Test func aStopDuringAPacedCampaignGivesUpUnstartedSendsAtOnce() async throws {
        var configuration = PipelineConfiguration()
        configuration.bulkMaxRate = 5  // one send every 200 ms
        configuration.commitInterval = .milliseconds(10)
        let bulkPartition = KafkaTopicPartition(topic: "push.requests.bulk", partition: 0)
        let bulk = InMemoryMessageSource((0..<50).map { RevocationFenceTests.request($0, topic: "push.requests.bulk") })
        let urgent = InMemoryMessageSource()
        let apns = ScriptedAPNSClient()
        let store = try await RevocationFenceTests.store()
        let pipeline = NotificationPipeline(
            configuration: configuration, source: urgent, bulkSource: bulk, publisher: FakePublisher(), store: store,
            ledger: store, apns: apns, logger: Logger(label: "test"))
        let phone = RevocationFenceTests.phone
        var stopped: Duration = .zero
        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await pipeline.run() }
                try await RevocationFenceTests.waitUntil { apns.callCount(phone) >= 2 }
                let started = ContinuousClock.now
                trigger.triggerGracefulShutdown()
                try await group.waitForAll()
                stopped = started.duration(to: .now)
            }
        }
        #expect(stopped < .seconds(2), "the stop waited \(stopped) for the pace")
        let sent = apns.callCount(phone)
        #expect(sent < 20, "\(sent) paced sends went out after the stop began")
        #expect(bulk.committed[bulkPartition] == Int64(sent), "committed up to the first message not sent")
        #expect(urgent.hasLeftGroup && bulk.hasLeftGroup, "each lane left its group")
    }

    /// A stop that begins while a result is still being published: the lane commits and leaves
    /// only once that result is out (no task waits for a poll batch; the state machine wakes the
    /// lane when nothing it started is in flight), so the next owner does not push it again.
    @Test func aStopWaitsForAResultStillBeingPublishedThenCommitsItAndLeaves() async throws {
        var configuration = PipelineConfiguration()
        configuration.commitInterval = .milliseconds(10)
        let partition = KafkaTopicPartition(topic: "push.requests", partition: 0)
        let urgent = InMemoryMessageSource([RevocationFenceTests.request(0)])
        let apns = ScriptedAPNSClient()
        // The broker acknowledges the first record half a second late.
        let publisher = FakePublisher(acknowledgeFirst: 1, after: .milliseconds(500))
        let store = try await RevocationFenceTests.store()
        let pipeline = NotificationPipeline(
            configuration: configuration, source: urgent, publisher: publisher, store: store, ledger: store, apns: apns,
            logger: Logger(label: "test"))
        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await pipeline.run() }
                try await RevocationFenceTests.waitUntil { apns.callCount(RevocationFenceTests.phone) == 1 }
                trigger.triggerGracefulShutdown()
                try await group.waitForAll()
            }
        }
        #expect(publisher.messages(on: "push.results").count == 1)
        #expect(urgent.committed[partition] == 1, "the stop committed the message whose result it waited for")
        #expect(urgent.hasLeftGroup)
    }
}
