import Synchronization

/// Wakes one waiting loop: ``signal()`` ends the current or the next ``wait(until:)`` at once,
/// so a loop sleeps until its next deadline or until something changed, and never polls.
final class Wakeup: Sendable {
    private struct State {
        var pending = false
        var continuation: CheckedContinuation<Void, Never>?
    }
    private let state = Mutex(State())

    /// Ends the wait in progress, or the next one if none is.
    func signal() {
        let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let continuation = state.continuation else {
                state.pending = true
                return nil
            }
            state.continuation = nil
            return continuation
        }
        continuation?.resume()
    }

    /// Returns at a signal, at `deadline` by `clock` (never when nil) or when the task is cancelled.
    func wait(until deadline: ContinuousClock.Instant?, clock: any TokenSourceClock) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForSignal() }
            if let deadline {
                group.addTask { try? await clock.sleep(until: deadline) }
            }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForSignal() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.pending || Task.isCancelled {
                        state.pending = false
                        return true
                    }
                    state.continuation = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
                defer { state.continuation = nil }
                return state.continuation
            }
            continuation?.resume()
        }
    }
}
