import KafkaMessages
import APNSCore
import Foundation
import HeraldService
import KafkaTransport
import Logging
import PostgresNIO

/// The local services of `scripts/services.sh` (source `.local/run/services.env`).
struct BenchServices {
    let brokers: String
    let postgresURL: String
    let tansuBinary: String
    let tansuURL: String

    init() throws {
        func variable(_ name: String) throws -> String {
            guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else {
                throw BenchFailure("\(name) is not set: run `scripts/services.sh start` and `source .local/run/services.env`")
            }
            return value
        }
        brokers = try variable("HERALD_KAFKA_BROKERS")
        postgresURL = try variable("HERALD_POSTGRES_URL")
        tansuBinary = try variable("HERALD_TANSU_BIN")
        tansuURL = try variable("HERALD_TANSU_URL")
    }

    /// Client settings as the integration tests use them (Tansu's first join waits half the session timeout).
    var kafka: KafkaConfiguration {
        KafkaConfiguration(bootstrapServers: brokers, properties: ["session.timeout.ms": "6000", "heartbeat.interval.ms": "1000"])
    }

    /// Creates topics with Tansu's CLI (Herald never creates topics).
    func createTopics(_ names: [String], partitions: Int) throws {
        for name in names {
            _ = try ChildProcess.runToCompletion(
                tansuBinary,
                arguments: ["topic", "create", name, "--broker", tansuURL, "--partitions", "\(partitions)"]
            )
        }
    }

    /// Deletes topics (best effort), so the in-memory broker does not grow run after run.
    func deleteTopics(_ names: [String]) {
        for name in names {
            _ = try? ChildProcess.runToCompletion(tansuBinary, arguments: ["topic", "delete", name, "--broker", tansuURL])
        }
    }

    /// The broker's processes: Tansu and the ApiVersions proxy in front of it.
    func brokerPIDs() -> (tansu: [Int32], proxy: [Int32]) {
        (
            ProcStats.pids { _, line in line.contains("broker --listener-url \(tansuURL)") },
            ProcStats.pids { _, line in line.contains("kafka-apiversions-proxy") && line.contains("--listen \(brokers)") }
        )
    }

    /// Autovacuum and autoanalyze runs so far of push.device_tokens and the ledger's partitions.
    func autovacuumCounts(logger: Logger) async throws -> [String: Int] {
        var counts: [String: Int] = [:]
        try await withPostgres(logger: logger) { client in
            let rows = try await client.query(
                """
                SELECT relname, autovacuum_count, autoanalyze_count FROM pg_stat_user_tables
                WHERE schemaname = 'push' AND (relname = 'device_tokens' OR relname LIKE 'delivery\\_ledger\\_%')
                """,
                logger: logger
            )
            for try await (table, vacuums, analyzes) in rows.decode((String, Int, Int).self) {
                counts["\(table) autovacuum"] = vacuums
                counts["\(table) autoanalyze"] = analyzes
            }
        }
        return counts
    }

    /// The transactions committed or rolled back in the benchmark's database so far: outside an
    /// explicit transaction each of Herald's statements is one, so the difference over a window
    /// counts its PostgreSQL round trips (the statistics lag by up to a second).
    func transactionCount(logger: Logger) async throws -> Int64 {
        var count: Int64 = 0
        try await withPostgres(logger: logger) { client in
            let rows = try await client.query(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()",
                logger: logger
            )
            for try await value in rows.decode(Int64.self) { count = value }
        }
        return count
    }

    /// Runs `body` with a PostgreSQL client that is closed afterwards.
    func withPostgres(logger: Logger, _ body: (PostgresClient) async throws -> Void) async throws {
        let client = try PostgresClient(configuration: PostgresURL(postgresURL).clientConfiguration(), backgroundLogger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            try await body(client)
        }
    }
}
