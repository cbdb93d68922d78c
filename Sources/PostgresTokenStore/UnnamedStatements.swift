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
    /// Runs the statement unnamed through `query` (a client's or a connection's) and decodes
    /// its rows.
    func executeUnnamed(
        _ query: (PostgresQuery) async throws -> PostgresRowSequence
    ) async throws -> AsyncThrowingMapSequence<PostgresRowSequence, Row> {
        try await query(PostgresQuery(unsafeSQL: Self.sql, binds: makeBindings())).map { try self.decodeRow($0) }
    }
}
