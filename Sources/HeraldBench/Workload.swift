import KafkaMessages
import APNSCore
import Foundation
import HeraldService
import KafkaTransport
import Logging
import PostgresNIO

/// A small, fast, seedable generator (SplitMix64), so a seed gives the same workload.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// How the events of a run address users.
enum PipelineShape: String, CaseIterable {
    case single, fanout, mixed

    var summary: String {
        switch self {
        case .single: "one user per event"
        case .fanout: "1,000 users per event"
        case .mixed: "90 % one user, 10 % 100 users per event"
        }
    }

    /// Users of the next event.
    func nextEventUsers(_ random: inout SplitMix64) -> Int {
        switch self {
        case .single: 1
        case .fanout: 1_000
        case .mixed: random.next() % 10 == 0 ? 100 : 1
        }
    }
}

/// The users, devices and events of one shape. Users are numbered; every user has 1 to 3
/// production devices and appears in exactly one event, so each token has exactly one
/// expected result, and a result's token tells its event. A browser's token is its
/// subscription's endpoint, set by ``assignSubscriptions(_:)`` once the mock push service made them.
struct Workload {
    /// The first app's bundle ID; the others add `.<n>` to it (``topic(ofEvent:)``).
    let bundleID: String
    /// How many apps the events take turns addressing.
    let apps: Int
    let eventPrefix: String
    private(set) var tokens: [String] = []
    /// Whether each token is an Android (FCM) device's, registered under the app's ID as its package.
    private(set) var tokenIsFCM: [Bool] = []
    /// The share of devices on Android (0: an APNs-only workload, and events carry no `fcm` part).
    let androidShare: Double
    /// Whether each token is a browser subscription's, registered under the app's ID.
    private(set) var tokenIsWebPush: [Bool] = []
    /// The share of devices that are browsers (0: events carry no `webpush` part).
    let browserShare: Double
    /// Each browser subscription's keys (base64url), "" for the other tokens.
    private(set) var webPushP256DH: [String] = []
    private(set) var webPushAuth: [String] = []
    /// The user (`u<n>`) of each token.
    private(set) var tokenUsers: [Int32] = []
    /// The event of each token.
    private(set) var tokenEvents: [Int32] = []
    /// Event i addresses users eventUserStarts[i] ..< eventUserStarts[i + 1].
    private(set) var eventUserStarts = [0]
    private(set) var tokenIndex: [String: Int32]

    var eventCount: Int { eventUserStarts.count - 1 }
    var userCount: Int { eventUserStarts.last ?? 0 }

    init(shape: PipelineShape, notifications: Int, seed: UInt64, tag: String, apps: Int, androidShare: Double = 0, browserShare: Double = 0) {
        bundleID = "com.example.bench.\(tag)"
        self.apps = apps
        self.androidShare = androidShare
        self.browserShare = browserShare
        eventPrefix = "\(tag)-"
        var random = SplitMix64(state: seed &+ UInt64(PipelineShape.allCases.firstIndex(of: shape) ?? 0))
        var users = 0
        while tokens.count < notifications {
            for _ in 0..<shape.nextEventUsers(&random) {
                for _ in 0..<Int.random(in: 1...3, using: &random) {
                    tokens.append(Self.hexToken(&random))
                    // One draw decides the platform: below androidShare Android, then browserShare
                    // browsers. No draw for an APNs-only workload, and the same one as before for an
                    // APNs and Android one: both stay as they were.
                    let draw = androidShare > 0 || browserShare > 0 ? Double.random(in: 0..<1, using: &random) : 1
                    tokenIsFCM.append(draw < androidShare)
                    tokenIsWebPush.append(draw >= androidShare && draw < androidShare + browserShare)
                    tokenUsers.append(Int32(users))
                    tokenEvents.append(Int32(eventUserStarts.count - 1))
                }
                users += 1
            }
            eventUserStarts.append(users)
        }
        webPushP256DH = [String](repeating: "", count: tokens.count)
        webPushAuth = webPushP256DH
        tokenIndex = Self.index(tokens)
    }

    /// Each token's position (the first one's, should two be equal).
    private static func index(_ tokens: [String]) -> [String: Int32] {
        Dictionary(zip(tokens, tokens.indices.map { Int32($0) }), uniquingKeysWith: { first, _ in first })
    }

    /// The positions of the browser tokens, in order.
    var webPushTokenIndices: [Int] { tokenIsWebPush.indices.filter { tokenIsWebPush[$0] } }

    /// How many tokens are browser subscriptions.
    var webPushTokenCount: Int { tokenIsWebPush.lazy.filter { $0 }.count }

    /// Makes the browser tokens these subscriptions, in order (one each): the endpoint becomes
    /// the token, the keys are registered beside it.
    mutating func assignSubscriptions(_ subscriptions: [MockWebPushSubscriber.Made]) {
        precondition(subscriptions.count == webPushTokenCount, "one subscription per browser token")
        for (index, subscription) in zip(webPushTokenIndices, subscriptions) {
            tokens[index] = subscription.endpoint
            webPushP256DH[index] = subscription.p256dh
            webPushAuth[index] = subscription.auth
        }
        tokenIndex = Self.index(tokens)
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// 64 hex digits (32 bytes), as APNs device tokens are.
    private static func hexToken(_ random: inout SplitMix64) -> String {
        String(unsafeUninitializedCapacity: 64) { buffer in
            for word in 0..<4 {
                var bits = random.next()
                for digit in 0..<16 {
                    buffer[word * 16 + digit] = hexDigits[Int(bits & 15)]
                    bits >>= 4
                }
            }
            return 64
        }
    }

    /// The event's id, whose number follows `eventPrefix`.
    func eventID(_ index: Int) -> String { "\(eventPrefix)\(index)" }

    /// The event's number, if `id` is one of this workload's.
    func eventIndex(_ id: String) -> Int? {
        guard id.hasPrefix(eventPrefix), let index = Int(id.dropFirst(eventPrefix.count)), index < eventCount else { return nil }
        return index
    }

    /// The app event `index` addresses (and its users' devices are registered for).
    func topic(ofEvent index: Int) -> String {
        index % apps == 0 ? bundleID : "\(bundleID).\(index % apps)"
    }

    /// How many tokens are Android devices'.
    var fcmTokenCount: Int { tokenIsFCM.lazy.filter { $0 }.count }

    /// Event `index` as push.requests JSON (the shape of HeraldTestbed.publishEvent); with
    /// Android devices, with an `fcm` part for the package of the app's ID; with browsers, with a
    /// `webpush` part for the app's ID.
    func eventJSON(_ index: Int) -> [UInt8] {
        let users = (eventUserStarts[index]..<eventUserStarts[index + 1]).map { "\"u\($0)\"" }.joined(separator: ",")
        let fcm =
            androidShare > 0
            ? #","fcm":{"package":"\#(topic(ofEvent: index))","message":{"notification":{"title":"Bench","body":"Event \#(index)"}}}"# : ""
        let webpush =
            browserShare > 0 ? #","webpush":{"app":"\#(topic(ofEvent: index))","message":{"title":"Bench","body":"Event \#(index)"}}"# : ""
        return Array(
            #"{"id":"\#(eventID(index))","user_ids":[\#(users)],"topic":"\#(topic(ofEvent: index))","payload":{"aps":{"alert":{"title":"Bench","body":"Event \#(index)"}}}\#(fcm)\#(webpush)}"#
                .utf8
        )
    }

    /// Inserts every token straight into push.device_tokens, 20,000 rows per statement (as an
    /// app API's bulk load would); then ANALYZE if asked. A browser's row holds its endpoint as
    /// the token and its subscription's keys (bound to the app's current VAPID key).
    func load(into client: PostgresClient, analyze: Bool, logger: Logger) async throws {
        for start in stride(from: 0, to: tokens.count, by: 20_000) {
            let rows = start..<min(start + 20_000, tokens.count)
            let batchTokens = Array(tokens[rows])
            let batchUsers = rows.map { "u\(tokenUsers[$0])" }
            let batchTopics = rows.map { topic(ofEvent: Int(tokenEvents[$0])) }
            let batchPlatforms = rows.map { tokenIsFCM[$0] ? "fcm" : tokenIsWebPush[$0] ? "webpush" : "apns" }
            guard browserShare > 0 else {
                try await client.query(
                    """
                    INSERT INTO push.device_tokens (topic, token, user_id, environment, registered_at, updated_at, platform, fcm_target)
                    SELECT topic, token, user_id, 'production', now(), now(), platform, CASE platform WHEN 'fcm' THEN 'token' END
                    FROM unnest(\(batchTopics)::text[], \(batchTokens)::text[], \(batchUsers)::text[], \(batchPlatforms)::text[])
                      AS rows(topic, token, user_id, platform)
                    """,
                    logger: logger
                )
                continue
            }
            let batchP256DH = Array(webPushP256DH[rows])
            let batchAuth = Array(webPushAuth[rows])
            try await client.query(
                """
                INSERT INTO push.device_tokens
                  (topic, token, user_id, environment, registered_at, updated_at, platform, fcm_target, webpush_p256dh, webpush_auth)
                SELECT topic, token, user_id, 'production', now(), now(), platform, CASE platform WHEN 'fcm' THEN 'token' END,
                       NULLIF(p256dh, ''), NULLIF(auth, '')
                FROM unnest(\(batchTopics)::text[], \(batchTokens)::text[], \(batchUsers)::text[], \(batchPlatforms)::text[],
                            \(batchP256DH)::text[], \(batchAuth)::text[])
                  AS rows(topic, token, user_id, platform, p256dh, auth)
                """,
                logger: logger
            )
        }
        if analyze { try await client.query("ANALYZE push.device_tokens", logger: logger) }
    }

    /// Removes this workload's tokens, so runs do not grow the registry, and vacuums it, so its
    /// dead rows do not set off autovacuum during the next shape. The ledger's rows stay, as in
    /// production, until their day's partition is dropped.
    func delete(from client: PostgresClient, logger: Logger) async throws {
        let topics = (0..<apps).map { topic(ofEvent: $0) }
        try await client.query("DELETE FROM push.device_tokens WHERE topic = ANY(\(topics))", logger: logger)
        try await client.query("VACUUM push.device_tokens", logger: logger)
    }
}
