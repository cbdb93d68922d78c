import Synchronization

/// Admits at most `limit` APNs sends at once (HERALD_MAX_CONCURRENT_SENDS); a sender that finds
/// none free waits in its lane, urgent before bulk, each in arrival order. Waiting is cancellable.
///
/// The pipeline takes one permit per device before that device's send starts and gives it back
/// once the result is published, so a burst of large fan-outs queues here, as neither tasks nor
/// requests, and a crash can repeat at most `limit` pushes. The decisions are
/// ``StateMachine``'s; this class holds it behind a lock and resumes waiters outside the lock.
final class SendPermits: Sendable {
    private let state: Mutex<StateMachine<CheckedContinuation<Void, any Error>>>
    private let waitIDs = Atomic<UInt64>(0)

    /// `bulkShare` of `limit` may be held by bulk senders at once (see ``StateMachine/bulkLimit``).
    init(limit: Int, bulkShare: Double = 1) {
        state = Mutex(StateMachine(limit: limit, bulkShare: bulkShare))
    }

    /// Permits held now.
    var inUse: Int {
        state.withLock { $0.inUse }
    }

    /// Senders waiting for a permit in `lane` now.
    func waiting(_ lane: Lane) -> Int {
        state.withLock { $0.waiting(lane) }
    }

    /// Takes a permit, waiting for one behind the earlier waiters of `lane` (and, for bulk,
    /// behind every urgent one); throws `CancellationError` if cancelled while waiting. Every
    /// permit taken must be given back with ``release(_:from:)``, naming the same lane.
    func acquire(_ lane: Lane = .urgent) async throws {
        if state.withLock({ $0.tryAcquire(lane) }) { return }
        let id = waitIDs.add(1, ordering: .relaxed).newValue
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let action = state.withLock { state -> StateMachine<CheckedContinuation<Void, any Error>>.EnqueueAction? in
                    // Checked under the lock: a cancellation handler that already ran found nothing to remove.
                    if Task.isCancelled { return nil }
                    return state.enqueue(continuation, id: id, lane: lane)
                }
                switch action {
                case nil: continuation.resume(throwing: CancellationError())
                case .resume(let waiter): waiter.resume()
                case .wait: break
                }
            }
        } onCancel: {
            state.withLock { $0.cancel(id: id) }?.resume(throwing: CancellationError())
        }
    }

    /// Gives back `count` permits that `lane`'s senders held, to the waiters first in line.
    func release(_ count: Int = 1, from lane: Lane) {
        for waiter in state.withLock({ $0.release(count, from: lane) }) { waiter.resume() }
    }
}
