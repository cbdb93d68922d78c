package import PushStores
import PostgresNIO

extension PostgresStore {
    /// PostgreSQL's answer sorted for retrying, by SQLSTATE class: connection exceptions (08),
    /// insufficient resources (53), operator intervention (57: a restart, a cancelled query),
    /// system errors (58), transaction rollbacks (40: serialization failures, deadlocks) and lock
    /// time-outs (55P03) clear by themselves; any other server error (42P01 undefined table,
    /// 42501 insufficient privilege, 23xxx constraint violations, ...) needs an operator. An error
    /// without a server answer (a lost or refused connection, a time-out) is transient.
    package func failure(of error: any Error) -> StoreFailure {
        guard let error = error as? PSQLError else { return .transient("connection") }
        guard error.code == .server, let state = error.serverInfo?[.sqlState] else { return .transient("connection") }
        if Self.transientClasses.contains(state.prefix(2)) || state == "55P03" { return .transient(state) }
        return StoreFailure(isPermanent: true, cause: state)
    }

    private static let transientClasses: Set<Substring> = ["08", "53", "57", "58", "40"]
}
