import Synchronization

/// A call that did not finish within its time limit.
package struct OperationTimedOut: Error, CustomStringConvertible {
    public var timeout: Duration
    public var description: String { "no answer within \(timeout)" }
}

/// Operations ``withTimeout(_:tracking:abandoning:)`` stopped waiting for (time-out or caller
/// cancelled) that have not ended yet: each still holds what it held (a PostgreSQL connection
/// mid-query, say) until it ends by itself. At most `limit` are abandoned at a time-out: the
/// count is taken as the operation is abandoned, so callers that time out together cannot pass
/// it; a caller past it waits for its operation instead. (A caller that is cancelled, at shutdown,
/// always stops waiting.)
package final class AbandonedOperations: Sendable {
    private let running = Atomic(0)
    /// The most operations left running by time-outs.
    package let limit: Int

    package init(limit: Int = .max) {
        self.limit = limit
    }

    /// How many are still running.
    package var count: Int { running.load(ordering: .relaxed) }

    /// Whether another time-out would find the bound full.
    package var isFull: Bool { count >= limit }

    /// Counts one more abandoned at a time-out, unless `limit` are already: false then.
    fileprivate func abandonWithinLimit() -> Bool {
        var current = running.load(ordering: .relaxed)
        while current < limit {
            let (exchanged, original) = running.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
        return false
    }

    fileprivate func abandoned() { running.add(1, ordering: .relaxed) }
    fileprivate func ended() { running.subtract(1, ordering: .relaxed) }
}

/// Runs `operation`; after `timeout` cancels it, stops waiting for it and throws
/// ``OperationTimedOut``. When the caller is cancelled first, the operation is cancelled too
/// and the caller stops waiting at once. An operation still running when the caller stopped
/// waiting is counted in `abandoned` until it ends.
///
/// Not waiting is the point: a postgres-nio query whose connection died mid-transaction was
/// seen neither to answer nor to react to cancellation, and waiting for it (as a task group
/// must for its children) stalled the notifications behind it for good. The operation runs in
/// a task of its own that hands its result over; on time-out that task is cancelled and left
/// to end whenever it does, so use this only for calls that are safe to repeat, and bound how
/// many may be left running with `abandoned` (``StoreOperations`` does).
package func withTimeout<Result: Sendable>(
    _ timeout: Duration,
    tracking abandoned: AbandonedOperations? = nil,
    abandoning operation: @escaping @Sendable () async throws -> Result
) async throws -> Result {
    let handOver = HandOver<Result>(abandoned: abandoned)
    let work = Task {
        do {
            handOver.deliver(.success(try await operation()))
        } catch {
            handOver.deliver(.failure(error))
        }
    }
    return try await withTaskCancellationHandler {
        try await withThrowingTaskGroup(of: Result?.self) { group in
            group.addTask { try await handOver.value }
            group.addTask {
                try await Task.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            if case .some(.some(let value)) = try await group.next() { return value }
            work.cancel()
            // The time limit passed. Past the bound of abandoned operations, wait for this one.
            guard handOver.abandonAtTimeOut() else {
                while let next = try await group.next() {
                    if let value = next { return value }
                }
                throw OperationTimedOut(timeout: timeout)
            }
            throw OperationTimedOut(timeout: timeout)
        }
    } onCancel: {
        work.cancel()
    }
}

/// One result, handed from the task computing it to the one waiting for it; the waiter gives
/// up when cancelled, whether or not the result has come.
private final class HandOver<Value: Sendable>: Sendable {
    private enum State {
        case pending
        case waiting(CheckedContinuation<Value, any Error>)
        case delivered(Result<Value, any Error>)
        /// The waiter gave up while the operation was still running.
        case abandoned
        /// Both sides are done.
        case closed
    }

    private let state = Mutex(State.pending)
    private let abandoned: AbandonedOperations?

    init(abandoned: AbandonedOperations?) {
        self.abandoned = abandoned
    }

    func deliver(_ result: Result<Value, any Error>) {
        let waiter = state.withLock { state -> CheckedContinuation<Value, any Error>? in
            switch state {
            case .pending:
                state = .delivered(result)
                return nil
            case .waiting(let continuation):
                state = .closed
                return continuation
            case .abandoned:
                state = .closed
                abandoned?.ended()  // Under the lock, so the count never goes below zero.
                return nil
            case .delivered, .closed:
                return nil
            }
        }
        waiter?.resume(with: result)
    }

    /// The caller's time limit passed: releases the waiter (counting the operation as
    /// abandoned) unless the bound of abandoned operations is full or the result is in; returns
    /// whether the caller stops waiting.
    func abandonAtTimeOut() -> Bool {
        let waiter = state.withLock { state -> (released: Bool, continuation: CheckedContinuation<Value, any Error>?) in
            switch state {
            case .pending:
                guard abandoned?.abandonWithinLimit() ?? true else { return (false, nil) }
                state = .abandoned
                return (true, nil)
            case .waiting(let continuation):
                guard abandoned?.abandonWithinLimit() ?? true else { return (false, nil) }
                state = .abandoned
                return (true, continuation)
            case .delivered:
                return (false, nil)
            case .abandoned, .closed:
                return (true, nil)
            }
        }
        waiter.continuation?.resume(throwing: CancellationError())
        return waiter.released
    }

    var value: Value {
        get async throws {
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    let ready: Result<Value, any Error>? = state.withLock { state in
                        switch state {
                        case .pending:
                            state = .waiting(continuation)
                            return nil
                        case .delivered(let result):
                            state = .closed
                            return result
                        case .waiting, .abandoned, .closed:
                            return .failure(CancellationError())
                        }
                    }
                    if let ready { continuation.resume(with: ready) }
                }
            } onCancel: {
                let waiter = state.withLock { state -> CheckedContinuation<Value, any Error>? in
                    switch state {
                    case .pending:
                        state = .abandoned
                        abandoned?.abandoned()
                        return nil
                    case .waiting(let continuation):
                        state = .abandoned
                        abandoned?.abandoned()
                        return continuation
                    case .delivered:
                        state = .closed
                        return nil
                    case .abandoned, .closed:
                        return nil
                    }
                }
                waiter?.resume(throwing: CancellationError())
            }
        }
    }
}
