import PushPipeline
import ServiceLifecycle
import Synchronization

/// A health check that runs at most once at a time and answers within its time limit.
///
/// A PostgreSQL query may wait for a connection, or on a dead one, far longer than a readiness
/// request should: each check gives up after `timeout` (the operation is cancelled, see
/// ``withTimeout(_:tracking:abandoning:)``), enforced while the probe runs as a service. A check that an earlier, still unfinished one would only
/// duplicate is not started: while an operation is outstanding, the answer is "not ready". So a
/// PostgreSQL outage leaves at most one probe behind, however often readiness is asked.
final class SingleFlightProbe: Service {
    private let timeLimit: TimeLimit
    private let operation: @Sendable () async throws -> Void
    private let outstanding = Atomic(false)

    init(timeout: Duration, operation: @escaping @Sendable () async throws -> Void) {
        self.timeLimit = TimeLimit(timeout)
        self.operation = operation
    }

    /// Whether the operation succeeded within the time limit.
    func check() async -> Bool {
        guard outstanding.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else {
            return false
        }
        let finished: @Sendable () async throws -> Void = { [self] in
            defer { outstanding.store(false, ordering: .releasing) }
            try await operation()
        }
        return (try? await withTimeout(timeLimit, abandoning: finished)) != nil
    }

    /// Enforces the checks' time limit until graceful shutdown.
    func run() async {
        await cancelWhenGracefulShutdown { await self.timeLimit.run() }
    }
}
