import Logging
import PostgresNIO

extension PostgresConnection {
    /// Runs `statement` (prepared once per connection) and returns its rows. When PostgreSQL
    /// answers with an error, the connection is closed before the error is rethrown:
    /// postgres-nio keeps a refused preparation (a table missing after a botched migration, say)
    /// for the rest of the connection's life and answers every later execution of the statement
    /// there with the same error, so a connection returned to the pool would go on failing once
    /// the cause is fixed. Its replacement prepares the statement again.
    func rows<Statement: PostgresPreparedStatement>(of statement: Statement, logger: Logger) async throws -> [Statement.Row] {
        do {
            var rows: [Statement.Row] = []
            for try await row in try await execute(statement, logger: logger) { rows.append(row) }
            return rows
        } catch let error as PSQLError where error.code == .server {
            try? await close()
            throw error
        }
    }
}
