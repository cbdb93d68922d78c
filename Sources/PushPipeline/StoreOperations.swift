import Logging

/// Runs the pipeline's registry and ledger operations: each attempt bounded by a timeout, and
/// retried with backoff while the store is unavailable, until it succeeds or the task is
/// cancelled (a message is never finished on a store error, so nothing is lost).
struct StoreOperations: Sendable {
    /// How long one attempt may take before it is abandoned and tried again.
    let timeout: Duration
    /// The wait between attempts.
    let backoff: Backoff
    let metrics: PipelineMetrics
    let logger: Logger

    /// Runs `operation` until it succeeds; throws only when cancelled.
    func run<Result: Sendable>(
        _ operation: @escaping @Sendable () async throws -> Result
    ) async throws(CancellationError) -> Result {
        var attempts = RetryAttempts()
        while true {
            if Task.isCancelled { throw CancellationError() }
            metrics.storeOperationStarted()
            defer { metrics.storeOperationEnded() }
            do {
                return try await withTimeout(timeout, abandoning: operation)
            } catch {
                metrics.recordStoreError()
                logger.warning(
                    "retrying token store",
                    metadata: [PipelineLoggingKeys.error: "\(error)", PipelineLoggingKeys.attempt: "\(attempts.failures + 1)"]
                )
                try await attempts.waitAfterFailure(backoff)
            }
        }
    }
}
