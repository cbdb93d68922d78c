import KafkaMessages
import PushCore
import APNSCore
import PushStores
import Foundation
import Logging
import Prometheus
import PushPipeline
import PushPipelineTesting
import ServiceLifecycle
import ServiceLifecycleTestKit
import Synchronization
import Testing

/// The Kafka-side gaps of the delivery guarantee: revocation inside a poll batch, publishes that
/// are slow or refused for good, and the NUL and derived collapse-ID rules.
@Suite(.timeLimit(.minutes(1)))
struct DeliveryHardeningTests {
    typealias Fixture = NotificationPipelineTests

    /// Runs a pipeline with `configure` applied until `done` holds, then stops it gracefully.
    static func run(
        source: InMemoryMessageSource,
        publisher: FakePublisher,
        store: FakeStore,
        apns: ScriptedAPNSClient,
        configure: (inout PipelineConfiguration) -> Void = { _ in },
        metrics: PrometheusCollectorRegistry = PrometheusCollectorRegistry(),
        until done: @escaping @Sendable (NotificationPipeline) -> Bool
    ) async throws {
        var configuration = PipelineConfiguration()
        configuration.retry = RetryPolicy(maxAttempts: 3, initialBackoff: .milliseconds(1), maximumBackoff: .milliseconds(5))
        configuration.commitInterval = .milliseconds(10)
        configure(&configuration)
        let pipeline = NotificationPipeline(
            configuration: configuration, source: source, publisher: publisher,
            store: store, ledger: store, apns: apns,
            metricsFactory: PrometheusMetricsFactory(registry: metrics), logger: Logger(label: "test"))
        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await pipeline.run() }
                while !done(pipeline) { try await Task.sleep(for: .milliseconds(5)) }
                trigger.triggerGracefulShutdown()
                try await group.waitForAll()
            }
        }
    }

    @Test func messagesOfAPartitionRevokedDuringThePollAreNotStartedOrCommitted() async throws {
        let revoked = KafkaTopicPartition(topic: "push.requests", partition: 1)
        let kept = KafkaTopicPartition(topic: "push.requests", partition: 0)
        let source = InMemoryMessageSource(
            [
                Fixture.request(0, Fixture.event("kept", users: ["alice"]), partition: 0),
                Fixture.request(7, Fixture.event("gone", users: ["bob"]), partition: 1),
            ],
            revokingDuringFirstPoll: [revoked]
        )
        let publisher = FakePublisher()
        let apns = ScriptedAPNSClient()
        try await Self.run(source: source, publisher: publisher, store: try await Fixture.registeredStore(), apns: apns) { _ in
            source.committed[kept] == 1
        }
        #expect(apns.sent.map(\.0.deviceToken).sorted() == [Fixture.alicePhone, Fixture.alicePad].sorted(), "bob's event is the new owner's")
        #expect(publisher.jsonObjects(on: "push.results").allSatisfy { $0["event_id"] as? String == "kept" })
        #expect(source.allCommits.allSatisfy { $0[revoked] == nil }, "no offset committed for a partition not held")
    }

    @Test func aSlowAcknowledgementIsAwaitedNotAnsweredWithASecondCopy() async throws {
        let source = InMemoryMessageSource([Fixture.request(0, Fixture.event("e1", users: ["bob"]))])
        // Acknowledged after 600 ms, far beyond the store time-out that used to abandon publishes.
        let publisher = FakePublisher(acknowledgeFirst: 1, after: .milliseconds(600))
        try await Self.run(
            source: source,
            publisher: publisher,
            store: try await Fixture.registeredStore(),
            apns: ScriptedAPNSClient(),
            configure: { $0.storeOperationTimeout = .milliseconds(100) }
        ) { _ in
            source.committed[KafkaTopicPartition(topic: "push.requests", partition: 0)] == 1
        }
        try await Task.sleep(for: .milliseconds(700))
        #expect(publisher.messages(on: "push.results").count == 1, "one copy of the result")
    }

    @Test func aDeadLetterTooLargeForTheBrokerGoesWithoutItsValue() async throws {
        let oversized = String(repeating: "x", count: 3000)
        let source = InMemoryMessageSource([Fixture.request(0, "{" + oversized)])
        let publisher = FakePublisher(refusing: { message, _ in
            guard message.topic == "push.dlq", message.value != nil else { return nil }
            return FakePublishError(cause: "MSG_SIZE_TOO_LARGE", isRetriable: false, isRecordTooLarge: true)
        })
        try await Self.run(source: source, publisher: publisher, store: try await Fixture.registeredStore(), apns: ScriptedAPNSClient()) { _ in
            source.committed[KafkaTopicPartition(topic: "push.requests", partition: 0)] == 1
        }
        let deadLetter = try #require(publisher.messages(on: "push.dlq").first)
        #expect(publisher.messages(on: "push.dlq").count == 1)
        #expect(deadLetter.value == nil)
        let headers = Dictionary(deadLetter.headers.map { ($0.key, $0.value.map { String(decoding: $0, as: UTF8.self) }) }) { first, _ in first }
        #expect(headers["herald-value-omitted"] == "too_large")
        #expect(headers["herald-error"] == "invalid_json")
    }

    @Test func aPermanentPublishErrorMakesThePipelineReportItUntilItClears() async throws {
        let source = InMemoryMessageSource([Fixture.request(0, Fixture.event("e1", users: ["bob"]))])
        // The results topic does not exist for the first two attempts, then an operator creates it.
        let publisher = FakePublisher(refusing: { message, attempt in
            attempt <= 2 ? FakePublishError(cause: "_UNKNOWN_TOPIC", isRetriable: false) : nil
        })
        let sawBlocked = Atomic(false)
        let metrics = PrometheusCollectorRegistry()
        try await Self.run(source: source, publisher: publisher, store: try await Fixture.registeredStore(), apns: ScriptedAPNSClient(), metrics: metrics) {
            pipeline in
            if pipeline.publishBlockedBy == ["_UNKNOWN_TOPIC"] { sawBlocked.store(true, ordering: .relaxed) }
            guard source.committed[KafkaTopicPartition(topic: "push.requests", partition: 0)] == 1 else { return false }
            #expect(pipeline.publishBlockedBy.isEmpty, "ready again once the record went through")
            #expect(metrics.emitToString().contains(#"herald_publish_permanent_errors_total{cause="_UNKNOWN_TOPIC"} 1"#))
            #expect(metrics.emitToString().contains(#"herald_publish_errors_total{cause="_UNKNOWN_TOPIC"} 2"#), "both refused attempts")
            return true
        }
        let blocked = sawBlocked.load(ordering: .relaxed)
        #expect(blocked)
        #expect(publisher.messages(on: "push.results").count == 1)
    }

    /// A record older than the ledger's retention may have lost its outcomes with its day's
    /// partition: it is delivered as an unknown event and counted, so operators see redeliveries
    /// that outlive the retention.
    @Test func aRecordOlderThanTheLedgerRetentionIsCountedAndDelivered() async throws {
        let eightDaysAgo = WallClock.millisecondsSince1970() - 8 * 86_400_000
        let source = InMemoryMessageSource([
            Fixture.request(0, Fixture.event("old", users: ["bob"]), timestamp: eightDaysAgo),
            Fixture.request(1, Fixture.event("recent", users: ["bob"]), timestamp: eightDaysAgo + 2 * 86_400_000),
        ])
        let publisher = FakePublisher()
        let metrics = PrometheusCollectorRegistry()
        try await Self.run(source: source, publisher: publisher, store: try await Fixture.registeredStore(), apns: ScriptedAPNSClient(), metrics: metrics) {
            _ in
            publisher.messages(on: "push.results").count == 2
        }
        #expect(metrics.emitToString().contains("herald_ledger_lookups_beyond_retention_total 1"), "\(metrics.emitToString())")
        #expect(publisher.jsonObjects(on: "push.results").allSatisfy { $0["status"] as? String == "delivered" })
    }

    @Test func aPayloadWithNULEscapesIsDeliveredAsGiven() async throws {
        let event = #"{"id":"e1","user_ids":["bob"],"topic":"com.example.shop","payload":{"aps":{"alert":"a\u0000b"}}}"#
        let source = InMemoryMessageSource([Fixture.request(0, event)])
        let publisher = FakePublisher()
        let apns = ScriptedAPNSClient()
        try await Self.run(source: source, publisher: publisher, store: try await Fixture.registeredStore(), apns: apns) { _ in
            publisher.messages(on: "push.results").count == 1
        }
        #expect(publisher.messages(on: "push.dlq").isEmpty)
        #expect(apns.sent.first.map { String(decoding: $0.0.payload, as: UTF8.self) } == #"{"aps":{"alert":"a\u0000b"}}"#)
    }

    @Test func derivedCollapseIDIsSentOnlyWhenConfiguredAndTheEventHasNone() async throws {
        let ownCollapseID = #"{"id":"e2","user_ids":["bob"],"topic":"com.example.shop","collapse_id":"mine","payload":{"aps":{"alert":"x"}}}"#
        for derives in [false, true] {
            let source = InMemoryMessageSource([Fixture.request(0, Fixture.event("e1", users: ["bob"])), Fixture.request(1, ownCollapseID)])
            let publisher = FakePublisher()
            let apns = ScriptedAPNSClient()
            try await Self.run(
                source: source,
                publisher: publisher,
                store: try await Fixture.registeredStore(),
                apns: apns,
                configure: { $0.derivesCollapseID = derives }
            ) { _ in
                publisher.messages(on: "push.results").count == 2
            }
            let byEvent = Dictionary(uniqueKeysWithValues: apns.sent.map { ($0.0.apnsID, $0.0.collapseID) })
            let first = byEvent[NotificationID.derive(eventID: "e1", token: Fixture.bobPhone)] ?? nil
            #expect(first == (derives ? NotificationID.collapseID(eventID: "e1") : nil))
            #expect(byEvent[NotificationID.derive(eventID: "e2", token: Fixture.bobPhone)] == "mine")
        }
        let derived = NotificationID.collapseID(eventID: String(repeating: "é", count: 64))
        #expect(derived.utf8.count <= 64 && derived.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F })
        #expect(derived == NotificationID.collapseID(eventID: String(repeating: "é", count: 64)), "the same for every copy")
    }
}

@Suite struct TimeoutTests {
    /// Runs `body` with a time limit of `duration` enforced.
    static func withLimit<Value: Sendable>(_ duration: Duration, _ body: (TimeLimit) async throws -> Value) async throws -> Value {
        let limit = TimeLimit(duration)
        return try await withThrowingTaskGroup(of: Void.self, returning: Value.self) { group in
            group.addTask { await limit.run() }
            defer { group.cancelAll() }
            return try await body(limit)
        }
    }

    @Test func aCancelledCallerCancelsTheOperation() async throws {
        let operationCancelled = Atomic(false)
        let started = Atomic(false)
        let limit = TimeLimit(.seconds(30))
        let caller = Task {
            try await withTimeout(limit) {
                started.store(true, ordering: .relaxed)
                do {
                    try await Task.sleep(for: .seconds(30))
                } catch {
                    operationCancelled.store(true, ordering: .relaxed)
                    throw error
                }
            }
        }
        while !started.load(ordering: .relaxed) { try await Task.sleep(for: .milliseconds(1)) }
        caller.cancel()
        await #expect(throws: CancellationError.self) { try await caller.value }
        for _ in 0..<1000 where !operationCancelled.load(ordering: .relaxed) { try await Task.sleep(for: .milliseconds(5)) }
        let cancelled = operationCancelled.load(ordering: .relaxed)
        #expect(cancelled, "the operation learned its caller went away")
    }

    @Test func aResultWithinTheLimitIsReturnedAndNothingIsAbandoned() async throws {
        let abandoned = AbandonedOperations()
        try await Self.withLimit(.seconds(30)) { limit in
            for value in 0..<1_000 {
                let returned = try await withTimeout(limit, tracking: abandoned) { value }
                #expect(returned == value)
            }
        }
        #expect(abandoned.count == 0)
    }

    /// A limit of zero passes sometimes before the caller waits and sometimes while it waits:
    /// either way the caller gets the time-out, and the operation, which ignores cancellation,
    /// counts as abandoned until it ends.
    @Test func aTimeOutBeforeOrWhileTheCallerWaitsAbandonsTheOperation() async throws {
        for _ in 0..<200 {
            let hung = StoreOperationsTests.Hung()
            let abandoned = AbandonedOperations()
            await #expect(throws: OperationTimedOut.self) {
                try await Self.withLimit(.zero) { limit in
                    try await withTimeout(limit, tracking: abandoned) { await hung.run() }
                }
            }
            #expect(abandoned.count == 1)
            hung.release()
            for _ in 0..<1_000 where abandoned.count > 0 { try await Task.sleep(for: .milliseconds(1)) }
            #expect(abandoned.count == 0)
        }
    }
}
