import APNSCore
import PushCore
import Testing

@testable import PushPipeline

/// The retry loop state every retrying part of the pipeline shares.
@Suite struct RetryAttemptsTests {
    @Test func retryAttemptsCountFailuresAndGrowTheirWaits() {
        let backoff = Backoff(initial: .milliseconds(10), maximum: .milliseconds(40))
        var attempts = RetryAttempts()
        let ceilings: [Duration] = (1...5).map { _ in
            let delay = attempts.delayAfterFailure(backoff)
            let ceiling = backoff.ceiling(afterAttempt: attempts.failures)
            #expect(delay >= .zero && delay <= ceiling)
            return ceiling
        }
        #expect(attempts.failures == 5)
        #expect(ceilings == [.milliseconds(10), .milliseconds(20), .milliseconds(40), .milliseconds(40), .milliseconds(40)])
    }

    @Test func waitingEndsWithCancellation() async {
        let waiting = Task {
            var attempts = RetryAttempts()
            try await attempts.waitAfterFailure(Backoff(initial: .seconds(3600), maximum: .seconds(3600)))
        }
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
    }
}
