import APNSCore
import DeviceTokenStore
import Logging

/// Runs the pipeline's registry and ledger operations: each attempt bounded by a timeout, and
/// retried with backoff until it succeeds or the task is cancelled (a message is never finished
/// on a store error, so nothing is lost).
///
/// A transient failure (connection lost, time-out, PostgreSQL restarting) is retried quietly
/// (`herald_postgres_errors_total`). A permanent one (a missing table, a revoked grant, a
/// violated constraint: ``StoreFailure/isPermanent``) needs an operator: it is logged once per
/// cause, counted in `herald_postgres_permanent_errors_total{sqlstate}`, named by
/// ``blockingCauses`` (Herald is unready with `postgres_failing:<sqlstate>`) while any operation
/// is held by it, and retried slowly, so a fix resumes the work without a restart.
///
/// A timed-out attempt is abandoned, not awaited (``withTimeout(_:tracking:abandoning:)``), and
/// ends when PostgreSQL or the connection does; at most `maxAbandoned` are left running at once
/// (`herald_postgres_abandoned_operations`): past it, attempts wait instead of starting, and a
/// timed-out one is awaited, and ``blockingCauses`` names `abandoned_operations` (Herald unready).
struct StoreOperations: Sendable {
    /// How long one attempt may take before it is abandoned and tried again.
    let timeout: Duration
    /// The wait between attempts after a transient failure.
    let backoff: Backoff
    /// The wait between attempts after a permanent failure.
    let permanentBackoff: Backoff
    /// Timed-out attempts still running, at most `maxAbandoned` (see ``withTimeout(_:tracking:abandoning:)``).
    let abandoned: AbandonedOperations
    /// Sorts a failure into transient or permanent (the store knows its errors).
    let classify: @Sendable (any Error) -> StoreFailure
    let metrics: PipelineMetrics
    let logger: Logger
    private let blocked = BlockingCauses()

    init(
        timeout: Duration,
        maxAbandoned: Int,
        backoff: Backoff,
        permanentBackoff: Backoff,
        classify: @escaping @Sendable (any Error) -> StoreFailure,
        metrics: PipelineMetrics,
        logger: Logger
    ) {
        self.timeout = timeout
        abandoned = AbandonedOperations(limit: maxAbandoned)
        self.backoff = backoff
        self.permanentBackoff = permanentBackoff
        self.classify = classify
        self.metrics = metrics
        self.logger = logger
    }

    /// The permanent failures holding operations right now, and `abandoned_operations` while
    /// the bound of abandoned time-outs is full (empty when the store works).
    var blockingCauses: [String] { blocked.causes + (abandoned.isFull ? ["abandoned_operations"] : []) }

    /// Runs `operation` until it succeeds; throws only when cancelled.
    func run<Result: Sendable>(
        _ operation: @escaping @Sendable () async throws -> Result
    ) async throws(CancellationError) -> Result {
        var attempts = RetryAttempts()
        var heldBy: String?
        defer { if let heldBy { release(heldBy) } }
        while true {
            if Task.isCancelled { throw CancellationError() }
            if abandoned.isFull {
                // PostgreSQL holds that many timed-out calls already: another would only add one.
                try await attempts.waitAfterFailure(backoff)
                continue
            }
            metrics.storeOperationStarted()
            defer { metrics.storeOperationEnded() }
            do {
                return try await withTimeout(timeout, tracking: abandoned, abandoning: operation)
            } catch {
                metrics.recordStoreError()
                let failure = error is OperationTimedOut ? .transient("timeout") : classify(error)
                if failure.isPermanent {
                    if heldBy != failure.cause {
                        if let heldBy { release(heldBy) }
                        hold(failure.cause, error: error)
                        heldBy = failure.cause
                    }
                    try await attempts.waitAfterFailure(permanentBackoff)
                    continue
                }
                if let heldBy { release(heldBy) }
                heldBy = nil
                logger.warning(
                    "retrying token store",
                    metadata: [PipelineLoggingKeys.error: "\(error)", PipelineLoggingKeys.attempt: "\(attempts.failures + 1)"]
                )
                try await attempts.waitAfterFailure(backoff)
            }
        }
    }

    /// Counts a permanent failure; logs it when it is the first operation this cause holds.
    private func hold(_ cause: String, error: any Error) {
        metrics.recordPermanentStoreError(cause)
        if blocked.hold(cause) {
            logger.error(
                "PostgreSQL refuses Herald's statements; Herald is unready until an operator fixes the cause",
                metadata: [PipelineLoggingKeys.sqlState: "\(cause)", PipelineLoggingKeys.error: "\(error)"]
            )
        }
    }

    private func release(_ cause: String) {
        if blocked.release(cause) {
            logger.info("PostgreSQL accepts Herald's statements again", metadata: [PipelineLoggingKeys.sqlState: "\(cause)"])
        }
    }
}
