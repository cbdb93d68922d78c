import APNSCore
import PushStores
import FCMCore
import Foundation
import KafkaMessages
import PushPipeline
import PushPipelineTesting
import Synchronization
import Testing

/// One event to a user's devices on both platforms, through the pipeline with in-memory parts
/// and a scripted FCM client: one result per device, each with its platform; an UNREGISTERED
/// answer marks the Android token and publishes push.unregistered with `platform: fcm`.
@Suite(.timeLimit(.minutes(1)))
struct AndroidDeliveryTests {
    static let pixel = "fcm-token:APA91b" + String(repeating: "Xy_-", count: 30)
    static let oldPixel = "fcm-token:gone" + String(repeating: "Q", count: 40)

    /// Answers FCM requests per target from a script (200 with a message name otherwise) and
    /// records each.
    final class ScriptedFCMClient: FCMClientProtocol {
        private let answers: [String: FCMResponse]
        private let sent = Mutex<[FCMRequest]>([])

        init(answers: [String: FCMResponse] = [:]) {
            self.answers = answers
        }

        func send(_ request: FCMRequest, deadline: ContinuousClock.Instant) async throws -> FCMResponse {
            sent.withLock { $0.append(request) }
            return answers[request.target.value] ?? FCMResponse(status: 200, messageName: "projects/p/messages/\(request.target.value.suffix(6))")
        }

        var requests: [FCMRequest] { sent.withLock { $0 } }
    }

    static func event(_ id: String) -> String {
        #"{"id":"\#(id)","user_ids":["alice","dave"],"topic":"com.example.shop","payload":{"aps":{"alert":"hi"}},"#
            + #""priority":10,"collapse_id":"order-7","fcm":{"package":"com.example.shop.android","message":{"data":{"order":"7"}}}}"#
    }

    @Test func oneEventReachesEveryDeviceOnBothPlatformsAndAnUnregisteredAndroidTokenIsMarked() async throws {
        let store = try await NotificationPipelineTests.registeredStore()
        let registered = Timestamp(millisecondsSince1970: 1_700_000_000_000)
        for (user, token) in [("alice", Self.pixel), ("dave", Self.oldPixel)] {
            try await store.apply(
                TokenRegistryUpdate(
                    action: .register, userID: user, token: token, topic: "com.example.shop.android", environment: .production,
                    timestamp: registered, platform: .fcm))
        }
        let unregistered = FCMResponse(status: 404, error: FCMErrorBody(code: 404, status: "NOT_FOUND", errorCode: .unregistered))
        let fcm = ScriptedFCMClient(answers: [Self.oldPixel: unregistered])
        let source = InMemoryMessageSource([NotificationPipelineTests.request(0, Self.event("e1"))])
        let publisher = FakePublisher()
        try await NotificationPipelineTests.run(source: source, publisher: publisher, store: store, apns: ScriptedAPNSClient(), fcm: fcm) {
            publisher.messages(on: "push.results").count == 4 && source.committed[KafkaTopicPartition(topic: "push.requests", partition: 0)] == 1
        }
        let results = publisher.jsonObjects(on: "push.results")
        let byToken = Dictionary(uniqueKeysWithValues: results.map { ($0["token"] as? String ?? "", $0) })
        #expect(Set(results.compactMap { $0["platform"] as? String }) == ["apns", "fcm"])
        let pixel = try #require(byToken[Self.pixel])
        #expect(pixel["status"] as? String == "delivered")
        #expect(pixel["platform"] as? String == "fcm")
        #expect(pixel["topic"] as? String == "com.example.shop.android")
        #expect(pixel["fcm_status"] as? Int == 200)
        #expect((pixel["fcm_message_id"] as? String)?.hasPrefix("projects/p/messages/") == true)
        #expect(pixel["apns_id"] is NSNull && pixel["apns_status"] is NSNull)
        let gone = try #require(byToken[Self.oldPixel])
        #expect(gone["status"] as? String == "unregistered")
        #expect(gone["reason"] as? String == "UNREGISTERED")
        #expect(byToken[NotificationPipelineTests.alicePhone]?["platform"] as? String == "apns")
        let event = try #require(publisher.jsonObjects(on: "push.unregistered").first)
        #expect(event["platform"] as? String == "fcm")
        #expect(event["topic"] as? String == "com.example.shop.android")
        #expect(try await store.activeDevices(apnsTopic: nil, fcmPackage: "com.example.shop.android", userIDs: ["dave"]).isEmpty)
        // The message as sent: Herald's mapping of priority and collapse_id, the app's data.
        let sent = try #require(fcm.requests.first { $0.target.value == Self.pixel })
        let body = String(decoding: sent.body(nowMilliseconds: 0), as: UTF8.self)
        #expect(body.contains(#""priority":"high""#) && body.contains(#""collapse_key":"order-7""#) && body.contains(#""order":"7""#))
        #expect(body.contains(#""token":"\#(Self.pixel)""#))
    }

    /// Issue 49, finding 5: an event for the `sandbox` environment (a QA push for developers'
    /// iPhones) reaches no Android device, whose devices are all `production`.
    @Test func aSandboxEventReachesNoAndroidDevice() async throws {
        let store = FakeStore()
        let registered = Timestamp(millisecondsSince1970: 1_700_000_000_000)
        try await store.apply(
            TokenRegistryUpdate(
                action: .register, userID: "alice", token: NotificationPipelineTests.alicePad, topic: "com.example.shop",
                environment: .sandbox, timestamp: registered))
        for user in ["alice", "dave"] {
            try await store.apply(
                TokenRegistryUpdate(
                    action: .register, userID: user, token: Self.pixel + user, topic: "com.example.shop.android", environment: .production,
                    timestamp: registered, platform: .fcm))
        }
        let fcm = ScriptedFCMClient()
        let event = Self.event("e-qa").replacingOccurrences(of: #""priority":10"#, with: #""priority":10,"environment":"sandbox""#)
        let source = InMemoryMessageSource([NotificationPipelineTests.request(0, event)])
        let publisher = FakePublisher()
        try await NotificationPipelineTests.run(source: source, publisher: publisher, store: store, apns: ScriptedAPNSClient(), fcm: fcm) {
            source.committed[KafkaTopicPartition(topic: "push.requests", partition: 0)] == 1
        }
        let results = publisher.jsonObjects(on: "push.results")
        #expect(fcm.requests.isEmpty, "no Android device got the sandbox event")
        #expect(results.count == 2)
        #expect(results.contains { $0["token"] as? String == NotificationPipelineTests.alicePad && $0["status"] as? String == "delivered" })
        #expect(results.contains { $0["user_id"] as? String == "dave" && $0["status"] as? String == "no_devices" })
    }

    @Test func withoutAnFCMClientAndroidDevicesAreRejectedNotSilentlyDropped() async throws {
        let store = FakeStore()
        try await store.apply(
            TokenRegistryUpdate(
                action: .register, userID: "alice", token: Self.pixel, topic: "com.example.shop.android", environment: .production,
                timestamp: Timestamp(millisecondsSince1970: 1_700_000_000_000), platform: .fcm))
        let source = InMemoryMessageSource([NotificationPipelineTests.request(0, Self.event("e2"))])
        let publisher = FakePublisher()
        try await NotificationPipelineTests.run(source: source, publisher: publisher, store: store, apns: ScriptedAPNSClient()) {
            publisher.messages(on: "push.results").count == 2
        }
        let results = publisher.jsonObjects(on: "push.results")
        let android = try #require(results.first { $0["platform"] as? String == "fcm" })
        #expect(android["status"] as? String == "rejected")
        #expect(android["reason"] as? String == "NoCredentialForPackage")
        #expect(results.contains { $0["status"] as? String == "no_devices" && $0["user_id"] as? String == "dave" })
    }
}
