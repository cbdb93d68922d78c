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
/// expected result, and a result's token tells its event.
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
    /// The user (`u<n>`) of each token.
    private(set) var tokenUsers: [Int32] = []
    /// The event of each token.
    private(set) var tokenEvents: [Int32] = []
    /// Event i addresses users eventUserStarts[i] ..< eventUserStarts[i + 1].
    private(set) var eventUserStarts = [0]
    let tokenIndex: [String: Int32]

    var eventCount: Int { eventUserStarts.count - 1 }
    var userCount: Int { eventUserStarts.last ?? 0 }

    init(shape: PipelineShape, notifications: Int, seed: UInt64, tag: String, apps: Int, androidShare: Double = 0) {
        bundleID = "com.example.bench.\(tag)"
        self.apps = apps
        self.androidShare = androidShare
        eventPrefix = "\(tag)-"
        var random = SplitMix64(state: seed &+ UInt64(PipelineShape.allCases.firstIndex(of: shape) ?? 0))
        var users = 0
        while tokens.count < notifications {
            for _ in 0..<shape.nextEventUsers(&random) {
                for _ in 0..<Int.random(in: 1...3, using: &random) {
                    tokens.append(Self.hexToken(&random))
                    // No draw without Android devices: the APNs-only workload stays as it was.
                    tokenIsFCM.append(androidShare > 0 && Double.random(in: 0..<1, using: &random) < androidShare)
                    tokenUsers.append(Int32(users))
                    tokenEvents.append(Int32(eventUserStarts.count - 1))
                }
                users += 1
            }
            eventUserStarts.append(users)
        }
        tokenIndex = Dictionary(zip(tokens, tokens.indices.map { Int32($0) }), uniquingKeysWith: { first, _ in first })
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
    /// Android devices, with an `fcm` part for the package of the app's ID.
    func eventJSON(_ index: Int) -> [UInt8] {
        let users = (eventUserStarts[index]..<eventUserStarts[index + 1]).map { "\"u\($0)\"" }.joined(separator: ",")
        let fcm =
            androidShare > 0
            ? #","fcm":{"package":"\#(topic(ofEvent: index))","message":{"notification":{"title":"Bench","body":"Event \#(index)"}}}"# : ""
        return Array(
            #"{"id":"\#(eventID(index))","user_ids":[\#(users)],"topic":"\#(topic(ofEvent: index))","payload":{"aps":{"alert":{"title":"Bench","body":"Event \#(index)"}}}\#(fcm)}"#
                .utf8
        )
    }

    /// Inserts every token straight into push.device_tokens, 20,000 rows per statement (as an
    /// app API's bulk load would); then ANALYZE if asked.
    func load(into client: PostgresClient, analyze: Bool, logger: Logger) async throws {
        for start in stride(from: 0, to: tokens.count, by: 20_000) {
            let rows = start..<min(start + 20_000, tokens.count)
            let batchTokens = Array(tokens[rows])
            let batchUsers = rows.map { "u\(tokenUsers[$0])" }
            let batchTopics = rows.map { topic(ofEvent: Int(tokenEvents[$0])) }
            let batchPlatforms = rows.map { tokenIsFCM[$0] ? "fcm" : "apns" }
            try await client.query(
                """
                INSERT INTO push.device_tokens (topic, token, user_id, environment, registered_at, updated_at, platform, fcm_target)
                SELECT topic, token, user_id, 'production', now(), now(), platform, CASE platform WHEN 'fcm' THEN 'token' END
                FROM unnest(\(batchTopics)::text[], \(batchTokens)::text[], \(batchUsers)::text[], \(batchPlatforms)::text[])
                  AS rows(topic, token, user_id, platform)
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
