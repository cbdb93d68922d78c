import Synchronization

/// Admits at most `limit` holders at once; others wait in FIFO order. Waiting is cancellable.
///
/// The pipeline takes one permit per device before it starts that device's task, so a burst of
/// large fan-outs queues here, as neither tasks nor requests, instead of piling onto the
/// connections where queued requests would run into their deadlines.
final class ConcurrencyLimit: Sendable {
    private struct Waiter {
        var id: Int
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var available: Int
        var waiters: [Waiter] = []
        var nextID = 0
    }

    private let state: Mutex<State>
    private let limit: Int

    init(limit: Int) {
        self.limit = max(1, limit)
        state = Mutex(State(available: self.limit))
    }

    /// Permits held now.
    var inUse: Int {
        state.withLock { limit - $0.available }
    }

    /// Takes a permit, waiting for one in FIFO order; throws `CancellationError` if cancelled
    /// while waiting. Every permit taken must be given back with ``release()``.
    func acquire() async throws {
        let id = state.withLock { state -> Int? in
            if state.available > 0 {
                state.available -= 1
                return nil
            }
            state.nextID += 1
            return state.nextID
        }
        guard let id else { return }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let resumeNow = state.withLock { state -> Bool in
                    if Task.isCancelled { return true }
                    state.waiters.append(Waiter(id: id, continuation: continuation))
                    return false
                }
                if resumeNow { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters.remove(at: index)
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Gives `count` permits back, to the longest waiters first.
    func release(_ count: Int = 1) {
        let next = state.withLock { state -> ArraySlice<Waiter> in
            let woken = state.waiters.prefix(count)
            state.waiters.removeFirst(woken.count)
            state.available += count - woken.count
            return woken
        }
        for waiter in next { waiter.continuation.resume() }
    }
}
