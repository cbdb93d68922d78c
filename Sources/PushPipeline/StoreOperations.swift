import Logging

/// Runs the pipeline's registry and ledger operations: each attempt bounded by a timeout, and
/// retried with backoff while the store is unavailable, until it succeeds or the task is
/// cancelled (a message is never finished on a store error, so nothing is lost).
struct StoreOperations: Sendable {
    /// How long one attempt may take before it is abandoned and tried again.
    let timeout: Duration
    /// The backoff between attempts.
    let policy = RetryPolicy(initialBackoff: .milliseconds(50), maximumBackoff: .seconds(5))
    let metrics: PipelineMetrics
    let logger: Logger

    /// Runs `operation` until it succeeds; throws only when cancelled.
    func run<Result: Sendable>(
        _ operation: @escaping @Sendable () async throws -> Result
    ) async throws(CancellationError) -> Result {
        var generator = SystemRandomNumberGenerator()
        var attempt = 0
        while true {
            if Task.isCancelled { throw CancellationError() }
            metrics.storeOperationStarted()
            defer { metrics.storeOperationEnded() }
            do {
                return try await withTimeout(timeout, abandoning: operation)
            } catch {
                metrics.recordStoreError()
                attempt += 1
                logger.warning("retrying token store", metadata: [PipelineLoggingKeys.error: "\(error)", PipelineLoggingKeys.attempt: "\(attempt)"])
                do {
                    try await Task.sleep(for: policy.backoff(afterAttempt: attempt, using: &generator))
                } catch {
                    throw CancellationError()
                }
            }
        }
    }
}
