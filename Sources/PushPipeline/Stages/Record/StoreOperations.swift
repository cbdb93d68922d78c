import APNSCore
import PushCore
import PushStores
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
/// A timed-out attempt is abandoned, not awaited (``withTimeout(_:tracking:abandoning:)``; the
/// time limit is enforced while ``runTimeLimit()`` runs), and
/// ends when PostgreSQL or the connection does; at most `maxAbandoned` are left running at once
/// (`herald_postgres_abandoned_operations`): past it, attempts wait instead of starting, and a
/// timed-out one is awaited, and ``blockingCauses`` names `abandoned_operations` (Herald unready).
struct StoreOperations: Sendable {
    /// How long one attempt may take before it is abandoned and tried again.
    let timeLimit: TimeLimit
    /// Timed-out attempts still running, at most `maxAbandoned` (see ``withTimeout(_:tracking:abandoning:)``).
    let abandoned: AbandonedOperations
    /// Sorts a failure into transient or permanent (the store knows its errors).
    let classify: @Sendable (any Error) -> StoreFailure
    let metrics: PipelineMetrics
    private let retry: PersistentRetry

    /// `backoff` paces attempts after transient failures, `permanentBackoff` after permanent ones.
    init(
        timeout: Duration,
        maxAbandoned: Int,
        backoff: Backoff,
        permanentBackoff: Backoff,
        classify: @escaping @Sendable (any Error) -> StoreFailure,
        taskExecutor: (any TaskExecutor)? = nil,
        metrics: PipelineMetrics,
        logger: Logger
    ) {
        self.timeLimit = TimeLimit(timeout, taskExecutor: taskExecutor)
        abandoned = AbandonedOperations(limit: maxAbandoned)
        self.classify = classify
        self.metrics = metrics
        let reports = PersistentRetry.Reports(
            held: { cause, error, first, _ in
                metrics.recordPermanentStoreError(cause)
                guard first else { return }
                logger.error(
                    "PostgreSQL refuses Herald's statements; Herald is unready until an operator fixes the cause",
                    metadata: [PipelineLoggingKeys.sqlState: "\(cause)", PipelineLoggingKeys.error: "\(error)"]
                )
            },
            released: { cause in logger.info("PostgreSQL accepts Herald's statements again", metadata: [PipelineLoggingKeys.sqlState: "\(cause)"]) },
            transient: { error, attempt, _ in
                logger.warning("retrying token store", metadata: [PipelineLoggingKeys.error: "\(error)", PipelineLoggingKeys.attempt: "\(attempt)"])
            }
        )
        retry = PersistentRetry(transientBackoff: backoff, permanentBackoff: permanentBackoff, reports: reports)
    }

    /// The permanent failures holding operations right now, and `abandoned_operations` while
    /// the bound of abandoned time-outs is full (empty when the store works).
    var blockingCauses: [String] { retry.blockingCauses + (abandoned.isFull ? ["abandoned_operations"] : []) }

    /// Enforces the time limit of every attempt, until cancelled.
    func runTimeLimit() async {
        await timeLimit.run()
    }

    /// Runs `operation` until it succeeds; throws only when cancelled.
    func run<Result: Sendable>(
        _ operation: @escaping @Sendable () async throws -> Result
    ) async throws(CancellationError) -> Result {
        try await retry.run { () async -> PersistentRetry.Attempt<Result> in
            // PostgreSQL holds that many timed-out calls already: another would only add one.
            if abandoned.isFull { return .notTried }
            metrics.storeOperationStarted()
            defer { metrics.storeOperationEnded() }
            do {
                return .succeeded(try await withTimeout(timeLimit, tracking: abandoned, abandoning: operation))
            } catch {
                metrics.recordStoreError()
                let failure = error is OperationTimedOut ? .transient("timeout") : classify(error)
                return failure.isPermanent ? .permanent(cause: failure.cause, error) : .transient(error)
            }
        }
    }
}
