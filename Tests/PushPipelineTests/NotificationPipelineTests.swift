import KafkaMessages
import PushCore
import APNSCore
import PushStores
import FCMCore
import Foundation
import Logging
import PushPipeline
import PushPipelineTesting
import ServiceLifecycle
import ServiceLifecycleTestKit
import Synchronization
import Testing
import WebPushCore

@Suite(.timeLimit(.minutes(1)))
struct NotificationPipelineTests {
    static let alicePhone = String(repeating: "a1", count: 32)
    static let alicePad = String(repeating: "a2", count: 32)
    static let bobPhone = String(repeating: "b1", count: 32)

    /// A record of 2026-11-26, 11:00 UTC: every copy of an event shares its ledger day.
    static let recordTimestamp: Int64 = 1_795_690_800_000

    static func request(_ offset: Int64, _ json: String, partition: Int32 = 0, timestamp: Int64 = recordTimestamp) -> KafkaMessage {
        KafkaMessage(
            topic: "push.requests",
            partition: partition,
            offset: offset,
            key: Array("k".utf8),
            value: Array(json.utf8),
            timestampMilliseconds: timestamp
        )
    }

    static func event(_ id: String, users: [String] = ["alice", "bob", "carol"]) -> String {
        let list = users.map { "\"\($0)\"" }.joined(separator: ",")
        return #"{"id":"\#(id)","user_ids":[\#(list)],"topic":"com.example.shop","payload":{"aps":{"alert":"hi"}}}"#
    }

    static func registeredStore(
        failFirstLookups: Int = 0,
        hangFirstLookups: Int = 0,
        failFirstRecords: Int = 0,
        hangFirstRecords: Int = 0
    ) async throws -> FakeStore {
        let store = FakeStore(
            failFirstLookups: failFirstLookups,
            hangFirstLookups: hangFirstLookups,
            failFirstRecords: failFirstRecords,
            hangFirstRecords: hangFirstRecords
        )
        let registered = Timestamp(millisecondsSince1970: 1_700_000_000_000)
        for (user, token, environment) in [
            ("alice", alicePhone, APNSEnvironment.production), ("alice", alicePad, .sandbox),
            ("bob", bobPhone, .production),
        ] {
            try await store.apply(
                TokenRegistryUpdate(
                    action: .register, userID: user, token: token, topic: "com.example.shop",
                    environment: environment, timestamp: registered))
        }
        return store
    }

    /// Runs the pipeline until `done` holds, then shuts it down gracefully.
    static func run(
        source: InMemoryMessageSource,
        publisher: FakePublisher,
        store: FakeStore,
        apns: ScriptedAPNSClient,
        fcm: (any FCMClientProtocol)? = nil,
        webPush: (any WebPushClientProtocol)? = nil,
        storeOperationTimeout: Duration = .seconds(10),
        taskExecutor: (any TaskExecutor)? = nil,
        until done: @escaping @Sendable () -> Bool
    ) async throws {
        var configuration = PipelineConfiguration()
        configuration.retry = RetryPolicy(maxAttempts: 3, initialBackoff: .milliseconds(1), maximumBackoff: .milliseconds(5))
        configuration.commitInterval = .milliseconds(10)
        configuration.storeOperationTimeout = storeOperationTimeout
        let pipeline = NotificationPipeline(
            configuration: configuration, source: source, publisher: publisher,
            store: store, ledger: store, apns: apns, fcm: fcm, webPush: webPush, taskExecutor: taskExecutor, logger: Logger(label: "test"))
        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await pipeline.run() }
                while !done() { try await Task.sleep(for: .milliseconds(5)) }
                trigger.triggerGracefulShutdown()
                try await group.waitForAll()
            }
        }
    }

    @Test func oneResultPerDeviceAndNoDevicesPerUserWithout() async throws {
        let source = InMemoryMessageSource([Self.request(0, Self.event("e1")), Self.request(1, Self.event("e2"))])
        let publisher = FakePublisher()
        let apns = ScriptedAPNSClient()
        try await Self.run(source: source, publisher: publisher, store: try await Self.registeredStore(), apns: apns) {
            publisher.messages(on: "push.results").count == 8 && source.committed[KafkaTopicPartition(topic: "push.requests", partition: 0)] == 2
        }
        let results = publisher.jsonObjects(on: "push.results")
        #expect(results.filter { $0["status"] as? String == "delivered" }.count == 6)
        let noDevices = results.filter { $0["status"] as? String == "no_devices" }
        #expect(noDevices.count == 2 && noDevices.allSatisfy { $0["user_id"] as? String == "carol" && $0["token"] is NSNull })
        #expect(apns.sent.count == 6)
        #expect(apns.sent.filter { $0.1 == .sandbox }.map(\.0.deviceToken) == [Self.alicePad, Self.alicePad])
        #expect(Set(apns.sent.map(\.0.apnsID)).count == 6)
        #expect(publisher.messages(on: "push.results").allSatisfy { $0.key == Array("e1".utf8) || $0.key == Array("e2".utf8) })
    }

    /// Given an executor, the pipeline runs there: a poll batch's lookups, the ledger writer's
    /// writes and the time-limited store calls' own tasks (``withTimeout(_:tracking:abandoning:)``).
    @Test func thePipelineRunsItsBatchesAndStoreCallsOnTheExecutorItIsGiven() async throws {
        let executor = QueueTaskExecutor()
        let store = FakeStore(placeOfCall: { executor.isCurrent })
        for (user, token) in [("alice", Self.alicePhone), ("bob", Self.bobPhone)] {
            try await store.apply(
                TokenRegistryUpdate(
                    action: .register, userID: user, token: token, topic: "com.example.shop",
                    environment: .production, timestamp: Timestamp(millisecondsSince1970: 1_700_000_000_000)))
        }
        let source = InMemoryMessageSource([Self.request(0, Self.event("e1")), Self.request(1, Self.event("e2"))])
        let publisher = FakePublisher()
        let apns = ScriptedAPNSClient()
        try await Self.run(source: source, publisher: publisher, store: store, apns: apns, taskExecutor: executor) {
            publisher.messages(on: "push.results").count == 6 && source.committed[KafkaTopicPartition(topic: "push.requests", partition: 0)] == 2
        }
        #expect(apns.sent.count == 4)
        let places = store.callPlaces
        #expect(places.count >= 3, "a token lookup, a ledger lookup and a ledger write at least")
        #expect(places.allSatisfy { $0 }, "every store call ran on the executor: \(places)")
        #expect(executor.jobsRun.load(ordering: .relaxed) > 0)
    }

    @Test func aLookupThatNeverAnswersIsCancelledAndRetried() async throws {
        let store = try await Self.registeredStore(hangFirstLookups: 1)
        let source = InMemoryMessageSource([Self.request(0, Self.event("e1"))])
        let publisher = FakePublisher()
        let apns = ScriptedAPNSClient()
        try await Self.run(source: source, publisher: publisher, store: store, apns: apns, storeOperationTimeout: .milliseconds(200)) {
            publisher.messages(on: "push.results").count == 4 && source.committed[KafkaTopicPartition(topic: "push.requests", partition: 0)] == 1
        }
        #expect(apns.sent.count == 3, "delivered once the retried lookup answered")
    }

    @Test func aLedgerWriteThatFailsOrNeverAnswersIsRetriedAndNothingIsPushedTwice() async throws {
        let store = try await Self.registeredStore(failFirstRecords: 2, hangFirstRecords: 1)
        let source = InMemoryMessageSource([Self.request(0, Self.event("e1", users: ["alice", "bob"]))])
        let publisher = FakePublisher()
        let apns = ScriptedAPNSClient()
        try await Self.run(source: source, publisher: publisher, store: store, apns: apns, storeOperationTimeout: .milliseconds(200)) {
            publisher.messages(on: "push.results").count == 3 && source.committed[KafkaTopicPartition(topic: "push.requests", partition: 0)] == 1
        }
        #expect(apns.sent.count == 3, "each device pushed once")
        #expect(store.recordedCount == 3)
        let written = store.recordedBatches.flatMap { $0.map(\.token) }
        #expect(written.sorted() == [Self.alicePhone, Self.alicePad, Self.bobPhone].sorted(), "every outcome written once it went through")
    }

    @Test func redeliveredAndDuplicatedEventsRepublishTheRecordedOutcomeWithoutPushingAgain() async throws {
        let store = try await Self.registeredStore()
        let apns = ScriptedAPNSClient(scripts: [Self.bobPhone: [.status(410, .unregistered, timestamp: 1_800_000_000_000)]])
        let first = FakePublisher()
        try await Self.run(
            source: InMemoryMessageSource([Self.request(0, Self.event("e1", users: ["alice", "bob"]))]), publisher: first,
            store: store, apns: apns
        ) {
            first.messages(on: "push.results").count == 3
        }
        #expect(apns.sent.count == 3)
        // The same event again (a redelivery after a crash), twice in one batch.
        let again = FakePublisher()
        let copies = [Self.request(5, Self.event("e1", users: ["alice", "bob"])), Self.request(6, Self.event("e1", users: ["alice", "bob"]))]
        try await Self.run(source: InMemoryMessageSource(copies), publisher: again, store: store, apns: apns) {
            again.messages(on: "push.results").count == 6
        }
        #expect(apns.sent.count == 3, "no second push")
        let firstResults = Set(first.messages(on: "push.results").map(\.value))
        #expect(Set(again.messages(on: "push.results").map(\.value)) == firstResults, "republished unchanged")
        #expect(again.messages(on: "push.unregistered").map(\.value) == Array(repeating: first.messages(on: "push.unregistered").first?.value, count: 2))
    }

    /// A record without a timestamp takes its ledger day from its poll: redelivered after a UTC
    /// midnight, it finds the outcomes its first delivery recorded the day before (found by
    /// the former model of the pipeline in the simulation, seed 1, once it simulated records without
    /// a timestamp).
    @Test func aRecordWithoutATimestampRedeliveredAfterMidnightIsNotPushedAgain() async throws {
        let store = try await Self.registeredStore()
        let apns = ScriptedAPNSClient()
        let untimed = KafkaMessage(topic: "push.requests", partition: 0, offset: 0, key: nil, value: Array(Self.event("e9", users: ["alice"]).utf8))
        store.recordsADayEarlier.store(true, ordering: .relaxed)
        let first = FakePublisher()
        try await Self.run(source: InMemoryMessageSource([untimed]), publisher: first, store: store, apns: apns) {
            first.messages(on: "push.results").count == 2
        }
        store.recordsADayEarlier.store(false, ordering: .relaxed)
        let again = FakePublisher()
        try await Self.run(source: InMemoryMessageSource([untimed]), publisher: again, store: store, apns: apns) {
            again.messages(on: "push.results").count == 2
        }
        #expect(apns.sent.count == 2, "alice's two devices pushed once each")
        #expect(Set(again.messages(on: "push.results").map(\.value)) == Set(first.messages(on: "push.results").map(\.value)), "republished")
    }

    @Test func copiesOfANewEventInOnePollPushEachDeviceOnceAndPublishTheSameResults() async throws {
        let store = try await Self.registeredStore()
        let apns = ScriptedAPNSClient()
        let publisher = FakePublisher()
        // Three copies in one poll: the first claims each device, the others find it being sent,
        // wait, and republish what the ledger recorded for it.
        let copies = (0..<3).map { Self.request(Int64($0), Self.event("e1", users: ["alice", "bob"])) }
        try await Self.run(source: InMemoryMessageSource(copies), publisher: publisher, store: store, apns: apns) {
            publisher.messages(on: "push.results").count == 9
        }
        #expect(apns.sent.count == 3, "each device pushed once")
        let results = publisher.messages(on: "push.results").map(\.value)
        #expect(Set(results).count == 3, "every copy publishes the same three results")
    }

    @Test func retriesOn503And429ThenDeliversAndRejectsBadDeviceToken() async throws {
        let apns = ScriptedAPNSClient(scripts: [
            Self.alicePhone: [.status(503, .serviceUnavailable), .status(429, .tooManyRequests)],
            Self.bobPhone: [.status(400, .badDeviceToken)],
            Self.alicePad: Array(repeating: .status(500, .internalServerError), count: 5),
        ])
        let source = InMemoryMessageSource([Self.request(0, Self.event("e1", users: ["alice", "bob"]))])
        let publisher = FakePublisher()
        try await Self.run(source: source, publisher: publisher, store: try await Self.registeredStore(), apns: apns) {
            publisher.messages(on: "push.results").count == 3
        }
        let byToken = Dictionary(uniqueKeysWithValues: publisher.jsonObjects(on: "push.results").map { ($0["token"] as? String ?? "", $0) })
        #expect(byToken[Self.alicePhone]?["status"] as? String == "delivered")
        #expect(byToken[Self.alicePhone]?["attempts"] as? Int == 3)
        #expect(byToken[Self.bobPhone]?["status"] as? String == "rejected")
        #expect(byToken[Self.bobPhone]?["reason"] as? String == "BadDeviceToken")
        #expect(byToken[Self.bobPhone]?["attempts"] as? Int == 1)
        #expect(byToken[Self.alicePad]?["status"] as? String == "failed")
        #expect(byToken[Self.alicePad]?["attempts"] as? Int == 3)
        #expect(byToken[Self.alicePad]?["apns_status"] as? Int == 500)
    }

    @Test func unregisteredMarksTheTokenOnceAndPublishesTheEvent() async throws {
        let apns = ScriptedAPNSClient(scripts: [Self.bobPhone: [.status(410, .unregistered, timestamp: 1_800_000_000_000)]])
        let store = try await Self.registeredStore()
        let source = InMemoryMessageSource([Self.request(0, Self.event("e1", users: ["bob"]))])
        let publisher = FakePublisher()
        try await Self.run(source: source, publisher: publisher, store: store, apns: apns) {
            publisher.messages(on: "push.results").count == 1 && publisher.messages(on: "push.unregistered").count == 1
        }
        #expect(publisher.jsonObjects(on: "push.results").first?["status"] as? String == "unregistered")
        let event = try #require(publisher.jsonObjects(on: "push.unregistered").first)
        #expect(event["token"] as? String == Self.bobPhone)
        #expect(event["unregistered_at"] as? String == "2027-01-15T08:00:00.000Z")
        #expect(event["event_id"] as? String == "e1")
        #expect(try await store.activeTokens(topic: "com.example.shop", userIDs: ["bob"], environment: nil).isEmpty)
    }

    @Test func badMessagesAreDeadLetteredWithHeadersAndDoNotStopTheRest() async throws {
        let source = InMemoryMessageSource([
            Self.request(0, "{oops"),
            Self.request(1, Self.event("e1", users: ["carol"])),
            KafkaMessage(
                topic: "push.tokens", partition: 0, offset: 0, key: nil,
                value: Array(#"{"action":"register","user_id":"u","token":"zz","topic":"t","timestamp":"2026-11-21T10:00:00Z"}"#.utf8)),
        ])
        let publisher = FakePublisher(failFirst: 2)
        try await Self.run(source: source, publisher: publisher, store: try await Self.registeredStore(failFirstLookups: 2), apns: ScriptedAPNSClient()) {
            publisher.messages(on: "push.dlq").count == 2 && publisher.messages(on: "push.results").count == 1
                && source.committed[KafkaTopicPartition(topic: "push.requests", partition: 0)] == 2
                && source.committed[KafkaTopicPartition(topic: "push.tokens", partition: 0)] == 1
        }
        let deadLetters = publisher.messages(on: "push.dlq")
        let invalidJSON = try #require(deadLetters.first { $0.value == Array("{oops".utf8) })
        func header(_ message: KafkaOutgoingMessage, _ key: String) -> String? {
            message.headers.first { $0.key == key }?.value.map { String(decoding: $0, as: UTF8.self) }
        }
        #expect(header(invalidJSON, "herald-error") == "invalid_json")
        #expect(header(invalidJSON, "herald-source-topic") == "push.requests")
        #expect(header(invalidJSON, "herald-source-partition") == "0")
        #expect(header(invalidJSON, "herald-source-offset") == "0")
        #expect(invalidJSON.key == Array("k".utf8))
        let invalidToken = try #require(deadLetters.first { header($0, "herald-source-topic") == "push.tokens" })
        #expect(header(invalidToken, "herald-error") == "invalid_token")
    }
}

@Suite struct RetryPolicyTests {
    @Test func backoffDoublesUpToTheCapWithFullJitter() {
        let policy = RetryPolicy(initialBackoff: .milliseconds(100), maximumBackoff: .seconds(2))
        #expect(policy.backoff.ceiling(afterAttempt: 1) == .milliseconds(100))
        #expect(policy.backoff.ceiling(afterAttempt: 2) == .milliseconds(200))
        #expect(policy.backoff.ceiling(afterAttempt: 4) == .milliseconds(800))
        #expect(policy.backoff.ceiling(afterAttempt: 6) == .seconds(2))
        #expect(policy.backoff.ceiling(afterAttempt: 60) == .seconds(2))
        var generator = SystemRandomNumberGenerator()
        let waits = (0..<200).map { _ in policy.backoff.delay(afterAttempt: 3, using: &generator) }
        #expect(waits.allSatisfy { $0 >= .zero && $0 <= .milliseconds(400) })
        #expect(Set(waits).count > 100, "jittered, not fixed")
    }
}
