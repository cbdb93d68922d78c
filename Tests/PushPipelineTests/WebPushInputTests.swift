import Foundation
import APNSCore
import KafkaMessages
import PushCore
import PushPipelineTesting
import Synchronization
import PushPipeline
import PushStores
import Testing
import WebPushCore

/// Browser subscriptions and events' `webpush` parts as the intake reads them: every refusal
/// named, before anything is stored or sent.
@Suite struct WebPushInputTests {
    /// RFC 8291 Appendix A's user agent keys: a point on P-256 and a 16-byte secret.
    static let p256dh = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let auth = "BTBZMqHH6r4Tts7J_aSIgg"

    static func subscription(endpoint: String, p256dh: String = p256dh, auth: String = auth, extra: String = "") -> [UInt8] {
        Array(
            """
            {"action":"register","user_id":"u","topic":"shop-web","platform":"webpush","timestamp":"2026-11-28T10:00:00Z",\(extra)
             "subscription":{"endpoint":"\(endpoint)","keys":{"p256dh":"\(p256dh)","auth":"\(auth)"}}}
            """.utf8)
    }

    @Test func aSubscriptionOnAnAllowedHostIsStoredWithItsKeys() throws {
        let update = try TokenRegistryUpdate(
            json: Self.subscription(endpoint: "https://web.push.apple.com/QGuQyavXut", extra: #""vapid_public_key":"\#(Self.p256dh)","#))
        #expect(update.platform == .webpush && update.token == "https://web.push.apple.com/QGuQyavXut" && update.topic == "shop-web")
        #expect(update.webPush == WebPushKeys(p256dh: Self.p256dh, auth: Self.auth, vapidPublicKey: Self.p256dh))
    }

    /// Each refusal is `invalid_token`: another host, plain http, a too-long endpoint, a key that
    /// is not a point on the curve, a secret that is not 16 bytes.
    @Test(arguments: [
        ("https://push.evil.example/x", p256dh, auth),
        ("http://fcm.googleapis.com/fcm/send/x", p256dh, auth),
        ("https://fcm.googleapis.com/" + String(repeating: "a", count: 2048), p256dh, auth),
        ("https://fcm.googleapis.com/fcm/send/x", "BAAA" + String(p256dh.dropFirst(4)), auth),
        ("https://fcm.googleapis.com/fcm/send/x", p256dh, "BTBZMqHH6r4Tts7J_aSI"),
    ])
    func aSubscriptionHeraldMustNotUseIsAnInvalidToken(endpoint: String, p256dh: String, auth: String) {
        do {
            _ = try TokenRegistryUpdate(json: Self.subscription(endpoint: endpoint, p256dh: p256dh, auth: auth))
            Issue.record("accepted \(endpoint.prefix(60))")
        } catch {
            #expect(error.code == .invalidToken, "\(error)")
        }
    }

    @Test func theAllowListIsTheConfiguredOne() throws {
        let mock = WebPushHostAllowList(["127.0.0.1"])
        #expect(throws: InputRejection.self) { try TokenRegistryUpdate(json: Self.subscription(endpoint: "https://fcm.googleapis.com/x"), webPushHosts: mock) }
        #expect(try TokenRegistryUpdate(json: Self.subscription(endpoint: "https://127.0.0.1:8451/push/1"), webPushHosts: mock).platform == .webpush)
    }

    @Test func anUnregistrationNamesTheEndpoint() throws {
        let update = try TokenRegistryUpdate(
            json: Array(
                #"{"action":"unregister","topic":"shop-web","platform":"webpush","token":"https://fcm.googleapis.com/x","timestamp":"2026-11-28T10:00:00Z"}"#
                    .utf8))
        #expect(update.action == .unregister && update.token == "https://fcm.googleapis.com/x" && update.webPush == nil)
    }

    static func event(_ webpush: String, extra: String = "") -> [UInt8] {
        Array(#"{"id":"e","user_ids":["u"],\#(extra)"webpush":\#(webpush)}"#.utf8)
    }

    /// `ttl_s` wins over `expiration`, which wins over four weeks; `urgency` over the one `priority`
    /// stands for; `collapse_id` becomes a hashed 32-character topic; a string message is sent as given.
    @Test func anEventsWebPushPartMapsTheContract() throws {
        let plain = try #require(try NotificationEvent(json: Self.event(#"{"app":"shop-web","message":"hi"}"#)).webpush)
        #expect(plain.plaintext == Array("hi".utf8) && plain.ttl == .seconds(WebPushTTL.defaultSeconds) && plain.urgency == .high)
        #expect(plain.topic == nil)
        let timed = try #require(
            try NotificationEvent(json: Self.event(#"{"app":"a","message":{"k":1}}"#, extra: #""expiration":1900000000,"priority":5,"collapse_id":"c1","#))
                .webpush)
        #expect(timed.ttl == .until(1_900_000_000) && timed.urgency == .normal && timed.plaintext == Array(#"{"k":1}"#.utf8))
        #expect(timed.topic?.count == 32 && timed.topic != "c1")
        #expect(timed.ttl.headerSeconds(nowMilliseconds: 1_899_999_000_000) == 1000)
        let explicit = try #require(
            try NotificationEvent(json: Self.event(#"{"app":"a","message":"m","ttl_s":60,"urgency":"very-low"}"#, extra: #""expiration":1900000000,"#)).webpush)
        #expect(explicit.ttl == .seconds(60) && explicit.urgency == .veryLow)
        let event = try NotificationEvent(json: Self.event(#"{"app":"shop-web","message":"hi"}"#))
        #expect(event.topic == "shop-web" && event.payload == nil && event.fcm == nil)
    }

    @Test func aWebPushPartHeraldCannotSendIsRefused() {
        func code(_ webpush: String) -> InputRejection.Code? {
            do {
                _ = try NotificationEvent(json: Self.event(webpush))
                return nil
            } catch {
                return error.code
            }
        }
        #expect(code(#"{"message":"m"}"#) == .schemaViolation)
        #expect(code(#"{"app":"a"}"#) == .schemaViolation)
        #expect(code(#"{"app":"a","message":"m","ttl_s":-1}"#) == .schemaViolation)
        #expect(code(#"{"app":"a","message":"m","urgency":"urgent"}"#) == .schemaViolation)
        #expect(code(#"{"app":"a","message":"\#(String(repeating: "x", count: 3993))"}"#) == nil)
        #expect(code(#"{"app":"a","message":"\#(String(repeating: "x", count: 3994))"}"#) == .payloadTooLarge)
        #expect(throws: InputRejection.self) { try NotificationEvent(json: Array(#"{"id":"e","channel_id":"AAAA","webpush":{"app":"a","message":"m"}}"#.utf8)) }
    }
}

/// The pipeline's rules for a push service's answers, with a scripted client: 403 (the
/// operator's VAPID key refused) is `rejected` and marks nothing, a lost answer is retried, an
/// app with no key is `rejected` unsent, a subscription row without usable keys is `rejected`,
/// `invalid_token`, and never handed to the client.
@Suite struct WebPushDeliveryTests {
    /// Answers per endpoint from a script (201 otherwise); records each request.
    final class ScriptedWebPushClient: WebPushClientProtocol {
        private let script: Mutex<[String: [Result<WebPushResponse, TransportError>]]>
        private let sent = Mutex<[WebPushRequest]>([])

        init(script: [String: [Result<WebPushResponse, TransportError>]] = [:]) {
            self.script = Mutex(script)
        }

        func send(_ request: WebPushRequest, deadline: ContinuousClock.Instant) async throws -> WebPushResponse {
            sent.withLock { $0.append(request) }
            let next = script.withLock { $0[request.subscription.endpoint]?.isEmpty == false ? $0[request.subscription.endpoint]!.removeFirst() : nil }
            return try next?.get() ?? WebPushResponse(status: 201, location: "https://push.example/m/1")
        }

        var requests: [WebPushRequest] { sent.withLock { $0 } }
    }

    static let app = "shop-web"
    static func endpoint(_ name: String) -> String { "https://fcm.googleapis.com/fcm/send/\(name)" }

    static func store(_ subscriptions: [(user: String, name: String, keys: WebPushKeys?)]) async throws -> FakeStore {
        let store = FakeStore()
        for subscription in subscriptions {
            try await store.apply(
                TokenRegistryUpdate(
                    action: .register, userID: subscription.user, token: endpoint(subscription.name), topic: app, environment: .production,
                    timestamp: Timestamp(millisecondsSince1970: 1_700_000_000_000), platform: .webpush, webPush: subscription.keys))
        }
        return store
    }

    static let keys = WebPushKeys(p256dh: WebPushInputTests.p256dh, auth: WebPushInputTests.auth)

    @Test func answersAreReadByTheRulesAndNothingIsMarkedForAVAPIDRefusal() async throws {
        let store = try await Self.store([("ana", "refused", Self.keys), ("ben", "flaky", Self.keys), ("cyd", "keyless", nil)])
        let client = ScriptedWebPushClient(script: [
            Self.endpoint("refused"): [.success(WebPushResponse(status: 403, reason: "BadJwtToken"))],
            Self.endpoint("flaky"): [.failure(.streamReset("no answer"))],
        ])
        let event = #"{"id":"w1","user_ids":["ana","ben","cyd"],"webpush":{"app":"\#(Self.app)","message":"hi"}}"#
        let source = InMemoryMessageSource([NotificationPipelineTests.request(0, event)])
        let publisher = FakePublisher()
        try await NotificationPipelineTests.run(source: source, publisher: publisher, store: store, apns: ScriptedAPNSClient(), webPush: client) {
            source.committed[KafkaTopicPartition(topic: "push.requests", partition: 0)] == 1
        }
        let results = Dictionary(uniqueKeysWithValues: publisher.jsonObjects(on: "push.results").map { ($0["user_id"] as? String ?? "", $0) })
        #expect(results["ana"]?["status"] as? String == "rejected" && results["ana"]?["webpush_status"] as? Int == 403)
        #expect(results["ana"]?["reason"] as? String == "BadJwtToken")
        #expect(results["ben"]?["status"] as? String == "delivered" && results["ben"]?["attempts"] as? Int == 2)
        #expect(results["ben"]?["webpush_location"] as? String == "https://push.example/m/1")
        #expect(results["cyd"]?["status"] as? String == "rejected" && results["cyd"]?["reason"] as? String == "invalid_token")
        #expect(results["cyd"]?["attempts"] as? Int == 0)
        #expect(!client.requests.contains { $0.subscription.endpoint == Self.endpoint("keyless") }, "a row without keys is never sent")
        #expect(try await store.activeDevices(apnsTopic: nil, fcmPackage: nil, webPushApp: Self.app, userIDs: ["ana"]).count == 1)
        #expect(publisher.messages(on: "push.unregistered").isEmpty)
    }

    @Test func withoutAWebPushClientBrowsersAreRejectedNotSilentlyDropped() async throws {
        let store = try await Self.store([("ana", "a", Self.keys)])
        let event = #"{"id":"w2","user_ids":["ana"],"webpush":{"app":"\#(Self.app)","message":"hi"}}"#
        let source = InMemoryMessageSource([NotificationPipelineTests.request(0, event)])
        let publisher = FakePublisher()
        try await NotificationPipelineTests.run(source: source, publisher: publisher, store: store, apns: ScriptedAPNSClient()) {
            source.committed[KafkaTopicPartition(topic: "push.requests", partition: 0)] == 1
        }
        let result = try #require(publisher.jsonObjects(on: "push.results").first)
        #expect(result["status"] as? String == "rejected" && result["reason"] as? String == WebPushNoCredentialError.resultReason)
        #expect(result["platform"] as? String == "webpush")
    }
}
