import PostgresStores
import APNSCore
import ArgumentParser
import PushStores
import Foundation
import HeraldService
import Logging
import PostgresNIO

/// The token lookup of a poll batch: one query for many users against PostgreSQL, timed against
/// the lookup of a single user on the same connection pool.
struct LookupBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lookup",
        abstract: "Time of one active-token lookup for --users users vs one user, on PostgreSQL.",
        discussion: """
            Migrates the database, fills a fresh topic with --other-users users' tokens (so the \
            planner sees a realistic table), registers --users users with two devices each \
            (through the same upsert push.tokens uses), then alternates --runs lookups of all \
            users and of one user. Prints the medians and their ratio; deletes the topic's rows.
            """
    )

    @Option(help: "PostgreSQL URL (default: $HERALD_POSTGRES_URL).") var postgresURL: String?
    @Option(help: "Users in the batched lookup.") var users = 1_000
    @Option(help: "Timed lookups of each kind.") var runs = 50
    @Option(help: "Users of the same app not looked up (two tokens each).") var otherUsers = 100_000

    func run() async throws {
        guard let urlText = postgresURL ?? ProcessInfo.processInfo.environment["HERALD_POSTGRES_URL"] else {
            throw ValidationError("give --postgres-url or set HERALD_POSTGRES_URL")
        }
        var logger = Logger(label: "herald-bench")
        logger.logLevel = .error
        let topic = "com.example.bench.\(UUID().uuidString.prefix(8).lowercased())"
        let userIDs = (0..<users).map { "bench-user-\($0)" }

        let client = try PostgresClient(configuration: PostgresURL(urlText).clientConfiguration(pipeline: true), backgroundLogger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            let store = PostgresStore(client: client, logger: logger)
            try await store.migrate()
            try await client.query(
                """
                INSERT INTO push.device_tokens (topic, token, user_id, environment, registered_at, updated_at)
                SELECT \(topic), md5(g::text) || md5((-g)::text), 'other-user-' || (g / 2), 'production', now(), now()
                FROM generate_series(0, \(2 * otherUsers - 1)) AS g
                """,
                logger: logger
            )
            try await Self.register(userIDs, topic: topic, in: store)
            try await client.query("ANALYZE push.device_tokens", logger: logger)

            var batched: [Double] = []
            var single: [Double] = []
            for run in 0...runs {
                let (batchTime, found) = try await Self.time { try await store.activeTokens(topic: topic, userIDs: userIDs, environment: nil) }
                let (singleTime, _) = try await Self.time {
                    try await store.activeTokens(topic: topic, userIDs: [userIDs[run % userIDs.count]], environment: nil)
                }
                guard found.count == users, found.values.allSatisfy({ $0.count == 2 }) else {
                    throw ValidationError("lookup returned \(found.count) users, expected \(users) with two tokens each")
                }
                // The first run only warms the pool and the prepared statement.
                if run > 0 {
                    batched.append(batchTime)
                    single.append(singleTime)
                }
            }
            print("lookup benchmark: \(runs) runs, topic \(topic) with \(otherUsers + users) users")
            print("median lookup of \(users) users (\(2 * users) tokens): \(column(batched.median, decimals: 2, width: 0)) ms")
            print("median lookup of 1 user (2 tokens):          \(column(single.median, decimals: 2, width: 0)) ms")
            print("\(users)-user lookup / 1-user lookup: \(column(batched.median / single.median, decimals: 1, width: 0))")
            try await client.query("DELETE FROM push.device_tokens WHERE topic = \(topic)", logger: logger)
        }
    }

    /// Two production devices per user, registered with concurrency 16.
    static func register(_ userIDs: [String], topic: String, in store: PostgresStore) async throws {
        let registeredAt = Timestamp.now()
        try await withThrowingTaskGroup(of: Void.self) { group in
            var pending = userIDs.flatMap { user in (0..<2).map { (user, $0) } }[...]
            func registerNext() {
                guard let (user, device) = pending.popFirst() else { return }
                group.addTask {
                    let token = (0..<31).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
                    _ = try await store.apply(
                        TokenRegistryUpdate(
                            action: .register,
                            userID: user,
                            token: token + String(format: "%02x", device),
                            topic: topic,
                            environment: .production,
                            timestamp: registeredAt
                        )
                    )
                }
            }
            for _ in 0..<16 { registerNext() }
            for try await _ in group { registerNext() }
        }
    }

    /// Runs `body` once; returns its wall time in milliseconds and its result.
    static func time<Result>(_ body: () async throws -> Result) async rethrows -> (Double, Result) {
        let start = ContinuousClock.now
        let result = try await body()
        return ((ContinuousClock.now - start).inSeconds * 1000, result)
    }
}
