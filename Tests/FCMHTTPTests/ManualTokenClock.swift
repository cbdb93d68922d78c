import FCMHTTP
import Synchronization

/// A clock for the access token source that moves only when the test moves it: a sleeper wakes
/// when ``advance(by:)`` passes its deadline, never by itself.
final class ManualTokenClock: TokenSourceClock {
    private struct State {
        var now = ContinuousClock.now
        var nextSleeperID: UInt64 = 0
        var sleepers: [UInt64: (deadline: ContinuousClock.Instant, continuation: CheckedContinuation<Void, any Error>)] = [:]
    }

    private let state = Mutex(State())

    var now: ContinuousClock.Instant { state.withLock { $0.now } }

    /// Moves the clock on and wakes every sleeper whose deadline it reached.
    func advance(by duration: Duration) {
        let woken = state.withLock { state in
            state.now += duration
            let due = state.sleepers.filter { $0.value.deadline <= state.now }
            for id in due.keys { state.sleepers[id] = nil }
            return due.values.map(\.continuation)
        }
        for continuation in woken { continuation.resume() }
    }

    func sleep(until deadline: ContinuousClock.Instant) async throws {
        let id = state.withLock { state in
            state.nextSleeperID += 1
            return state.nextSleeperID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let result = state.withLock { state -> Result<Void, any Error>? in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if deadline <= state.now { return .success(()) }
                    state.sleepers[id] = (deadline, continuation)
                    return nil
                }
                if let result { continuation.resume(with: result) }
            }
        } onCancel: {
            state.withLock { $0.sleepers.removeValue(forKey: id) }?.continuation.resume(throwing: CancellationError())
        }
    }
}
