import APNSCore
import PushCore
import PushStores
@testable import PostgresStores
import HeraldService
import Logging
import PostgresNIO
import Testing

/// The token lookup on the pipeline's pool in the worst statistics state met: the table
/// analyzed while the app had two tokens, then 20,000 tokens of 10,000 users bulk-loaded before
/// the next analyze (inside a transaction that is rolled back). The lookup must still probe the
/// active-token index by user, not read every token of the app.
///
/// Serialized: each test migrates, and on a fresh database a migration running beside another
/// leaves the ledger's partitions to it, so a plan could be made before today's partition exists.
@Suite(.serialized) struct LookupPlanTests {
    @Test func thePipelinePoolProbesTheTokenLookupByUserWhateverTheStatistics() async throws {
        let logger = Self.logger
        let (settings, plan) = try await Self.withPipelinePoolConnection { connection in
            var settings: [String] = []
            for setting in ["plan_cache_mode", "enable_seqscan"] {
                settings += try await connection.query(PostgresQuery(unsafeSQL: "SHOW \(setting)"), logger: logger).collect().map {
                    try $0.decode(String.self)
                }
            }
            try await connection.query("BEGIN", logger: logger)
            try await connection.query("DELETE FROM push.device_tokens", logger: logger)
            try await connection.query(
                """
                INSERT INTO push.device_tokens (topic, token, user_id, environment, registered_at, updated_at)
                VALUES ('com.example.plan', 'aa', 'u-1', 'production', now(), now()),
                       ('com.example.plan', 'bb', 'u-2', 'production', now(), now())
                """,
                logger: logger
            )
            try await connection.query("ANALYZE push.device_tokens", logger: logger)
            try await connection.query(
                """
                INSERT INTO push.device_tokens (topic, token, user_id, environment, registered_at, updated_at)
                SELECT 'com.example.plan', md5(i::text) || md5(i::text), 'u-' || (i / 2), 'production', now(), now()
                FROM generate_series(1, 20000) AS i
                """,
                logger: logger
            )
            try await connection.query(
                PostgresQuery(unsafeSQL: "PREPARE lookup_plan(text, text, text[], text) AS " + ActiveDevicesStatement.sql), logger: logger)
            let plan = try await connection.query(
                "EXPLAIN EXECUTE lookup_plan('com.example.plan', 'com.example.plan.android', ARRAY['u-1', 'u-2'], 'plan-web')",
                logger: logger
            ).collect().map { try $0.decode(String.self) }
            try await connection.query("ROLLBACK", logger: logger)
            try await connection.query("DEALLOCATE lookup_plan", logger: logger)
            return (settings, plan.joined(separator: "\n"))
        }
        #expect(settings == ["force_generic_plan", "off"])
        #expect(plan.contains("device_tokens_active_by_user_first"), "\(plan)")
        #expect(plan.contains("Index Cond: (user_id = ANY ($3))"), "\(plan)")
        #expect(!plan.contains("device_tokens_pkey") && !plan.contains("Seq Scan"), "\(plan)")
    }

    /// The ledger lookup runs prepared, its generic plan kept for the connection's life: made
    /// while today's partition was empty and analyzed, then kept while 20,000 rows arrive (inside
    /// a transaction that is rolled back), it must still probe the primary key by event, not
    /// read the partition.
    @Test func theLedgerLookupPlannedOnAnEmptyLedgerStillProbesByEvent() async throws {
        let logger = Self.logger
        let today = LedgerEvent.day(ofMilliseconds: WallClock.millisecondsSince1970())
        let (empty, grown) = try await Self.withPipelinePoolConnection { connection in
            func explain() async throws -> String {
                try await connection.query(
                    PostgresQuery(
                        unsafeSQL: """
                            EXPLAIN EXECUTE ledger_plan(\(today), ARRAY['6f1ed002-ab5d-4d7a-8a0a-2f0a1d2b3c4d', \
                            '7f1ed002-ab5d-4d7a-8a0a-2f0a1d2b3c4d']::uuid[], \(today))
                            """
                    ),
                    logger: logger
                ).collect().map { try $0.decode(String.self) }.joined(separator: "\n")
            }
            try await connection.query("BEGIN", logger: logger)
            try await connection.query("DELETE FROM push.delivery_ledger", logger: logger)
            try await connection.query("ANALYZE push.delivery_ledger", logger: logger)
            let prepare = "PREPARE ledger_plan(integer, uuid[], integer) AS " + RecordedDeliveriesStatement.sql
            try await connection.query(PostgresQuery(unsafeSQL: prepare), logger: logger)
            let empty = try await explain()
            try await connection.query(
                PostgresQuery(
                    unsafeSQL: """
                        INSERT INTO push.delivery_ledger (event_key, day, token, device, user_id, status, sandbox, attempts, latency_ms, completed_at)
                        SELECT md5(i::text)::uuid, \(today), decode(md5(i::text), 'hex'), true, 'u-' || i, 1, false, 1, 1, 0
                        FROM generate_series(1, 20000) AS i
                        """
                ),
                logger: logger
            )
            let grown = try await explain()
            try await connection.query("ROLLBACK", logger: logger)
            try await connection.query("DEALLOCATE ledger_plan", logger: logger)
            return (empty, grown)
        }
        for plan in [empty, grown] {
            #expect(plan.contains("Index Scan using delivery_ledger_") && plan.contains("Index Cond: ((event_key = ANY ($2))"), "\(plan)")
            #expect(plan.contains("Subplans Removed"), "pruned to the day's partition when it starts: \(plan)")
            #expect(!plan.contains("Seq Scan"), "\(plan)")
        }
    }

    /// Both lookups as one statement: each branch of its `UNION ALL` keeps its own plan, the
    /// devices probed by user and the ledger by event in the day's partition only.
    @Test func theCombinedLookupKeepsBothBranchesPlans() async throws {
        let logger = Self.logger
        let today = LedgerEvent.day(ofMilliseconds: WallClock.millisecondsSince1970())
        let plan = try await Self.withPipelinePoolConnection { connection in
            let prepare =
                "PREPARE both_plan(text, text, text[], text, integer, uuid[], integer) AS " + DevicesAndRecordedDeliveriesStatement.sql
            try await connection.query(PostgresQuery(unsafeSQL: prepare), logger: logger)
            let plan = try await connection.query(
                PostgresQuery(
                    unsafeSQL: """
                        EXPLAIN EXECUTE both_plan('com.example.plan', 'com.example.plan.android', ARRAY['u-1', 'u-2'], 'plan-web', \(today), \
                        ARRAY['6f1ed002-ab5d-4d7a-8a0a-2f0a1d2b3c4d']::uuid[], \(today))
                        """
                ),
                logger: logger
            ).collect().map { try $0.decode(String.self) }.joined(separator: "\n")
            try await connection.query("DEALLOCATE both_plan", logger: logger)
            return plan
        }
        #expect(plan.contains("device_tokens_active_by_user_first") && plan.contains("Index Cond: (user_id = ANY ($3))"), "\(plan)")
        #expect(plan.contains("Index Scan using delivery_ledger_") && plan.contains("Index Cond: ((event_key = ANY ($6))"), "\(plan)")
        #expect(plan.contains("Subplans Removed"), "pruned to the day's partition when it starts: \(plan)")
        #expect(!plan.contains("Seq Scan"), "\(plan)")
    }

    static let logger = Logger(label: "test.plan")

    /// Runs `body` on a connection of a one-connection pool configured as the pipeline's, on a
    /// migrated database.
    static func withPipelinePoolConnection<Result: Sendable>(
        _ body: @escaping @Sendable (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        let url = try PostgresURL(TestEnvironment.postgresURL)
        let client = PostgresClient(configuration: url.clientConfiguration(maximumConnections: 1, pipeline: true), backgroundLogger: logger)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            try await HeraldApplication.migrate(
                configuration: await HeraldConfiguration(environment: ["HERALD_POSTGRES_URL": try TestEnvironment.postgresURL]), logger: logger)
            return try await client.withConnection(body)
        }
    }
}
