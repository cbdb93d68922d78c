import Logging
import PostgresNIO
import Synchronization

/// Finds a pooled connection that died while it sat idle (a NAT mapping expired, a failover
/// moved the server) before a statement waits on it: a connection idle for longer than
/// `idlePeriod` first answers `SELECT 1` within `bound`, or is closed, with every other
/// connection idle as long, and the statement runs on another.
///
/// The pipeline's pool runs no postgres-nio keep-alive: its timers are started and cancelled
/// at every statement. This check costs one lock per statement and one round trip per idle
/// period, and only a connection found silent pays a timer.
package final class IdleConnectionCheck: Sendable {
    let idlePeriod: Duration
    let bound: Duration
    private struct State {
        /// Each connection seen, by id, and when it was last leased or found alive.
        var seen: [PostgresConnection.ID: (connection: PostgresConnection, lastUse: ContinuousClock.Instant)] = [:]
        /// The connections this check closed whose closing the pool may not have seen yet.
        var closing: Set<PostgresConnection.ID> = []
    }

    /// One lock per statement: the lease's check and its use are one step.
    private let state = Mutex(State())

    /// - Parameters:
    ///   - idlePeriod: how long a connection may sit idle before its next lease checks it.
    ///   - bound: how long the check waits for the answer.
    package init(after idlePeriod: Duration = .seconds(30), bound: Duration = .seconds(2)) {
        self.idlePeriod = idlePeriod
        self.bound = bound
    }

    /// Runs `body` on a connection of `client`'s pool that is alive or was used within the idle
    /// period. A connection found dead is closed and another leased; after four found dead in a
    /// row this throws ``DeadConnections`` (a connection failure: the store's callers retry).
    func withConnection<Result>(
        of client: PostgresClient,
        logger: Logger,
        _ body: (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        var foundDead = 0
        // A connection this check closed can be leased again until the pool sees it close: its
        // lease waits for that (bounded by the leases of the pool's size, many times over).
        for _ in 0..<64 where foundDead < 4 {
            let ran: Result? = try await client.withConnection { connection in
                switch await liveness(of: connection, logger: logger) {
                case .alive: return try await body(connection)
                case .dead: foundDead += 1
                case .closing: try? await connection.closeFuture.get()
                }
                return nil
            }
            if let ran { return ran }
        }
        throw DeadConnections()
    }

    enum Liveness { case alive, dead, closing }

    /// Whether `connection` answers, asking only when it has been idle for the idle period.
    private func liveness(of connection: PostgresConnection, logger: Logger) async -> Liveness {
        guard !connection.isClosed else { return .closing }
        let now = ContinuousClock.now
        let lastUse = state.withLock { state -> ContinuousClock.Instant?? in
            guard !state.closing.contains(connection.id) else { return nil }
            defer { state.seen[connection.id] = (connection, now) }
            return .some(state.seen[connection.id]?.lastUse)
        }
        guard let lastUse else { return .closing }
        // A connection seen for the first time was opened at most one idle period ago, or sat
        // in the pool since before anything leased it: the latter is checked.
        guard lastUse.map({ now - $0 >= idlePeriod }) ?? (now - created >= idlePeriod) else { return .alive }
        let silence = connection.eventLoop.scheduleTask(in: .init(bound)) { connection.closeNow() }
        defer { silence.cancel() }
        do {
            try await connection.query("SELECT 1", logger: logger)
            return .alive
        } catch {
            logger.warning("closing PostgreSQL connections that died while idle", metadata: ["error": "\(String(describing: type(of: error)))"])
            closeIdle(before: now - idlePeriod, besides: connection)
            return .dead
        }
    }

    /// When this check was made: connections first seen later than one idle period after it may
    /// have sat in the pool unleased.
    private let created = ContinuousClock.now

    /// Closes `dead` and every connection whose last use was before `cutOff` (idle in the pool
    /// since a time the dead one was), and forgets closed ones.
    private func closeIdle(before cutOff: ContinuousClock.Instant, besides dead: PostgresConnection) {
        let stale = state.withLock { state in
            state.seen[dead.id] = nil
            let stale = state.seen.values.filter { $0.lastUse < cutOff || $0.connection.isClosed }.map(\.connection) + [dead]
            for connection in stale {
                state.seen[connection.id] = nil
                state.closing.insert(connection.id)
            }
            return stale
        }
        for connection in stale {
            connection.closeFuture.whenComplete { _ in self.state.withLock { _ = $0.closing.remove(connection.id) } }
            connection.closeNow()
        }
    }
}

extension PostgresConnection {
    /// Closes the connection without waiting (the pool replaces it).
    fileprivate func closeNow() {
        let future: EventLoopFuture<Void> = close()
        future.whenComplete { _ in }
    }
}

/// Every connection leased was found dead: PostgreSQL's connections fail (a failover, a partition).
package struct DeadConnections: Error, CustomStringConvertible {
    package var description: String { "PostgreSQL connections found dead one after another" }
}
