@testable import DeviceTokenStore
import HeraldService
import Logging
import PostgresNIO
import Testing

/// The token lookup on the pipeline's pool: planned generically, and on a table of a real app's
/// shape (20,000 tokens of 10,000 users, inserted and analyzed inside a transaction that is
/// rolled back) that plan probes the active-token index by user and app.
@Suite struct LookupPlanTests {
    @Test func thePipelinePoolPlansTheTokenLookupByUserAndApp() async throws {
        let url = try PostgresURL(TestEnvironment.postgresURL)
        let logger = Logger(label: "test.plan")
        let client = PostgresClient(configuration: url.clientConfiguration(maximumConnections: 1, genericPlansOnly: true), backgroundLogger: logger)
        let (mode, plan) = try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            try await HeraldApplication.migrate(configuration: HeraldConfiguration(environment: ["HERALD_POSTGRES_URL": TestEnvironment.postgresURL]), logger: logger)
            return try await client.withConnection { connection in
                let mode = try await connection.query("SHOW plan_cache_mode", logger: logger).collect().map { try $0.decode(String.self) }
                try await connection.query("BEGIN", logger: logger)
                try await connection.query(
                    """
                    INSERT INTO push.device_tokens (topic, token, user_id, environment, registered_at, updated_at)
                    SELECT 'com.example.plan', md5(i::text) || md5(i::text), 'u-' || (i / 2), 'production', now(), now()
                    FROM generate_series(1, 20000) AS i
                    """,
                    logger: logger
                )
                // Statistics of this table's real shape (many users, a few devices each), not of
                // whatever the other suites left; rolled back with the rows.
                try await connection.query("ANALYZE push.device_tokens", logger: logger)
                try await connection.query(PostgresQuery(unsafeSQL: "PREPARE lookup_plan(text, text[], text) AS " + ActiveTokensStatement.sql), logger: logger)
                let plan = try await connection.query(
                    "EXPLAIN EXECUTE lookup_plan('com.example.plan', ARRAY['u-1', 'u-2'], NULL)",
                    logger: logger
                ).collect().map { try $0.decode(String.self) }
                try await connection.query("ROLLBACK", logger: logger)
                try await connection.query("DEALLOCATE lookup_plan", logger: logger)
                return (mode, plan.joined(separator: "\n"))
            }
        }
        #expect(mode == ["force_generic_plan"])
        #expect(plan.contains("device_tokens_active_by_user_first"), "\(plan)")
        #expect(plan.contains("Index Cond: ((user_id = ANY ($2)) AND (topic = $1))"), "\(plan)")
    }
}
