import Synchronization

/// A call that did not finish within its time limit.
package struct OperationTimedOut: Error, CustomStringConvertible {
    public var timeout: Duration
    public var description: String { "no answer within \(timeout)" }
}

/// Runs `operation`; after `timeout` cancels it, stops waiting for it and throws
/// ``OperationTimedOut``. When the caller is cancelled first, the operation is cancelled too
/// and the caller stops waiting at once.
///
/// Not waiting is the point: a postgres-nio query whose connection died mid-transaction was
/// seen neither to answer nor to react to cancellation, and waiting for it (as a task group
/// must for its children) stalled the notifications behind it for good. The operation runs in
/// a task of its own that hands its result over; on time-out that task is cancelled and left
/// to end whenever it does, so use this only for calls that are safe to repeat.
package func withTimeout<Result: Sendable>(
    _ timeout: Duration,
    abandoning operation: @escaping @Sendable () async throws -> Result
) async throws -> Result {
    let handOver = HandOver<Result>()
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
            guard case .some(.some(let value)) = try await group.next() else {
                work.cancel()
                throw OperationTimedOut(timeout: timeout)
            }
            return value
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
        case abandoned
    }

    private let state = Mutex(State.pending)

    func deliver(_ result: Result<Value, any Error>) {
        let waiter: CheckedContinuation<Value, any Error>? = state.withLock { state in
            switch state {
            case .pending:
                state = .delivered(result)
                return nil
            case .waiting(let continuation):
                state = .abandoned
                return continuation
            case .delivered, .abandoned:
                return nil
            }
        }
        waiter?.resume(with: result)
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
                            state = .abandoned
                            return result
                        case .waiting, .abandoned:
                            return .failure(CancellationError())
                        }
                    }
                    if let ready { continuation.resume(with: ready) }
                }
            } onCancel: {
                let waiter: CheckedContinuation<Value, any Error>? = state.withLock { state in
                    guard case .waiting(let continuation) = state else {
                        if case .pending = state { state = .abandoned }
                        return nil
                    }
                    state = .abandoned
                    return continuation
                }
                waiter?.resume(throwing: CancellationError())
            }
        }
    }
}
