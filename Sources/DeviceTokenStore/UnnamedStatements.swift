import Logging
import PostgresNIO

/// The hot path's statements run unnamed: parsed and planned at each execution.
///
/// A named (prepared) statement keeps the plan of its first executions for the connection's
/// lifetime, and a plan made while `push.deliveries` was nearly empty scans it sequentially
/// forever after: the ledger lookup took 0.5 to 2 s per poll batch once the table held 90,000
/// rows (auto_explain during `herald-bench pipeline`; BENCHMARKS.md). Planned at each execution,
/// the plan follows the tables' current size; planning costs a fraction of a millisecond per
/// poll batch. The statements keep the ``PostgresPreparedStatement`` shape (SQL, bindings, row
/// decoding) for their typed bindings and rows.
extension PostgresPreparedStatement {
    /// The statement as an unnamed query with its bindings.
    func unnamedQuery() throws -> PostgresQuery {
        PostgresQuery(unsafeSQL: Self.sql, binds: try makeBindings())
    }
}

extension PostgresClient {
    /// Runs `statement` unnamed (see above) and decodes its rows.
    func executeUnnamed<Statement: PostgresPreparedStatement>(
        _ statement: Statement,
        logger: Logger
    ) async throws -> AsyncThrowingMapSequence<PostgresRowSequence, Statement.Row> {
        try await query(statement.unnamedQuery(), logger: logger).map { try statement.decodeRow($0) }
    }
}

extension PostgresConnection {
    /// Runs `statement` unnamed (see above) and decodes its rows.
    func executeUnnamed<Statement: PostgresPreparedStatement>(
        _ statement: Statement,
        logger: Logger
    ) async throws -> AsyncThrowingMapSequence<PostgresRowSequence, Statement.Row> {
        try await query(statement.unnamedQuery(), logger: logger).map { try statement.decodeRow($0) }
    }
}
