import APNSCore
import PushCore

/// One operation's retry loop state: its failed attempts and the wait after each. A caller
/// tries, and on failure calls ``waitAfterFailure(_:)`` (or takes the delay to decide itself).
struct RetryAttempts {
    /// Failed attempts so far.
    private(set) var failures = 0
    private var generator = PipelineRandom()

    /// Counts a failed attempt and returns the wait before the next one.
    mutating func delayAfterFailure(_ backoff: Backoff) -> Duration {
        failures += 1
        return backoff.delay(afterAttempt: failures, using: &generator)
    }

    /// Counts a failed attempt and sleeps its backoff; throws only when cancelled.
    mutating func waitAfterFailure(_ backoff: Backoff) async throws(CancellationError) {
        try await Self.wait(delayAfterFailure(backoff))
    }

    /// Sleeps `delay`; throws only when cancelled.
    static func wait(_ delay: Duration) async throws(CancellationError) {
        do {
            try await PipelineClock().sleep(for: delay)
        } catch {
            throw CancellationError()
        }
    }
}
