import Synchronization

/// A call that did not finish within its time limit.
package struct OperationTimedOut: Error, CustomStringConvertible {
    public var timeout: Duration
    public var description: String { "no answer within \(timeout)" }
}

/// The time limit of one kind of operation, and the one sleeper that enforces it for every
/// call: ``run()`` must be running for a call to ever time out, and to forget the calls that
/// ended (the pipeline runs its store operations' limit beside its consumers; the readiness
/// probe's is a service).
///
/// Every call gets the same limit, so deadlines come in the order the calls started and a queue
/// is enough: the sleeper wakes at the oldest deadline, drops the calls that ended, times out
/// those that did not, and sleeps until the next. At a steady load calls end within
/// milliseconds, so it wakes about once per limit. Measured with perf at a steady load: a timer
/// and a task group per store call (three per poll batch) were a large share of Herald's CPU, in
/// `Task.sleep`'s dispatch timers and the wake-ups of libdispatch's timer thread (BENCHMARKS.md,
/// "What each change bought").
package final class TimeLimit: Sendable {
    /// How long a call may take.
    package let duration: Duration
    /// Where the operations' tasks run (nil: the global executor).
    let taskExecutor: (any TaskExecutor)?

    private struct State {
        /// Calls by deadline, oldest first; `head` is the first not yet taken.
        var calls: [(deadline: ContinuousClock.Instant, call: any TimeLimitedCall)] = []
        var head = 0
        /// The sleeper, while it waits for a call.
        var sleeper: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    package init(_ duration: Duration, taskExecutor: (any TaskExecutor)? = nil) {
        self.duration = duration
        self.taskExecutor = taskExecutor
    }

    /// Times out the calls that outlive the limit, until cancelled.
    package func run() async {
        while !Task.isCancelled {
            let now = PipelineClock.now
            let (expired, nextDeadline) = state.withLock { state -> ([any TimeLimitedCall], ContinuousClock.Instant?) in
                var expired: [any TimeLimitedCall] = []
                while state.head < state.calls.count {
                    let (deadline, call) = state.calls[state.head]
                    if !call.hasEnded {
                        guard deadline <= now else { break }
                        expired.append(call)
                    }
                    state.head += 1
                }
                if state.head > 1024, state.head * 2 > state.calls.count {
                    state.calls.removeFirst(state.head)
                    state.head = 0
                }
                return (expired, state.head < state.calls.count ? state.calls[state.head].deadline : nil)
            }
            for call in expired { call.timeLimitPassed() }
            if let nextDeadline {
                try? await PipelineClock().sleep(until: nextDeadline)
            } else {
                await waitForACall()
            }
        }
    }

    private func waitForACall() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let wakeNow = state.withLock { state in
                    guard state.head == state.calls.count, !Task.isCancelled else { return true }
                    state.sleeper = continuation
                    return false
                }
                if wakeNow { continuation.resume() }
            }
        } onCancel: {
            state.withLock { state in
                defer { state.sleeper = nil }
                return state.sleeper
            }?.resume()
        }
    }

    fileprivate func add(_ call: any TimeLimitedCall) {
        let sleeper = state.withLock { state in
            state.calls.append((PipelineClock.now + duration, call))
            defer { state.sleeper = nil }
            return state.sleeper
        }
        sleeper?.resume()
    }
}

/// A call ``TimeLimit`` watches.
private protocol TimeLimitedCall: AnyObject, Sendable {
    /// The call ended, or its caller stopped waiting: no time-out is due.
    var hasEnded: Bool { get }
    /// The limit passed while the call was running.
    func timeLimitPassed()
}

/// Runs `operation` within `limit`: when the limit passes first (``TimeLimit/run()`` is
/// running), the operation is cancelled, the caller stops waiting and gets
/// ``OperationTimedOut``. When the caller is cancelled first, the operation is cancelled too and
/// the caller stops waiting at once. An operation still running when the caller stopped waiting
/// is counted in `abandoned` until it ends.
///
/// Not waiting is the point: a postgres-nio query whose connection died mid-transaction was
/// seen neither to answer nor to react to cancellation, and waiting for it stalled the
/// notifications behind it for good. The operation runs in a task of its own that hands its
/// result over; on time-out that task is cancelled and left to end whenever it does, so use this
/// only for calls that are safe to repeat, and bound how many may be left running with
/// `abandoned` (``StoreOperations`` does): past the bound, a timed-out caller waits for its
/// operation after all.
package func withTimeout<Result: Sendable>(
    _ limit: TimeLimit,
    tracking abandoned: AbandonedOperations? = nil,
    abandoning operation: @escaping @Sendable () async throws -> Result
) async throws -> Result {
    let handOver = HandOver<Result>(limit: limit.duration, abandoned: abandoned)
    let work = Task(executorPreference: limit.taskExecutor) {
        do {
            handOver.deliver(.success(try await operation()))
        } catch {
            handOver.deliver(.failure(error))
        }
    }
    handOver.attach(work)
    limit.add(handOver)
    return try await withTaskCancellationHandler {
        try await handOver.value
    } onCancel: {
        work.cancel()
    }
}

/// One result, handed from the task computing it to the caller waiting for it; the caller
/// stops waiting when it is cancelled or the time limit passes, whether or not the result has
/// come.
private final class HandOver<Value: Sendable>: TimeLimitedCall {
    private enum State {
        case pending
        case waiting(CheckedContinuation<Value, any Error>)
        case delivered(Result<Value, any Error>)
        /// The caller stopped waiting (at the time limit, or cancelled) while the operation ran.
        case abandoned(timedOut: Bool)
        /// Both sides are done.
        case closed
    }

    private struct Guarded {
        var state = State.pending
        /// The task running the operation, cancelled at the time limit.
        var work: Task<Void, Never>?
    }

    private let guarded = Mutex(Guarded())
    private let limit: Duration
    private let abandoned: AbandonedOperations?

    init(limit: Duration, abandoned: AbandonedOperations?) {
        self.limit = limit
        self.abandoned = abandoned
    }

    func attach(_ work: Task<Void, Never>) {
        guarded.withLock { $0.work = work }
    }

    var hasEnded: Bool {
        guarded.withLock { guarded in
            switch guarded.state {
            case .pending, .waiting: false
            case .delivered, .abandoned, .closed: true
            }
        }
    }

    func deliver(_ result: Result<Value, any Error>) {
        let waiter = guarded.withLock { guarded -> CheckedContinuation<Value, any Error>? in
            switch guarded.state {
            case .pending:
                guarded.state = .delivered(result)
                return nil
            case .waiting(let continuation):
                guarded.state = .closed
                return continuation
            case .abandoned:
                guarded.state = .closed
                abandoned?.ended()  // Under the lock, so the count never goes below zero.
                return nil
            case .delivered, .closed:
                return nil
            }
        }
        waiter?.resume(with: result)
    }

    /// Cancels the operation and releases the caller, counting the operation as abandoned,
    /// unless the bound of abandoned operations is full: the caller then waits for it after all.
    func timeLimitPassed() {
        let (work, waiter) = guarded.withLock { guarded -> (Task<Void, Never>?, CheckedContinuation<Value, any Error>?) in
            switch guarded.state {
            case .pending:
                guard abandoned?.abandonWithinLimit() ?? true else { return (guarded.work, nil) }
                guarded.state = .abandoned(timedOut: true)
                return (guarded.work, nil)
            case .waiting(let continuation):
                guard abandoned?.abandonWithinLimit() ?? true else { return (guarded.work, nil) }
                guarded.state = .abandoned(timedOut: true)
                return (guarded.work, continuation)
            case .delivered, .abandoned, .closed:
                return (nil, nil)
            }
        }
        work?.cancel()
        waiter?.resume(throwing: OperationTimedOut(timeout: limit))
    }

    var value: Value {
        get async throws {
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    let ready: Result<Value, any Error>? = guarded.withLock { guarded in
                        switch guarded.state {
                        case .pending:
                            guarded.state = .waiting(continuation)
                            return nil
                        case .delivered(let result):
                            guarded.state = .closed
                            return result
                        case .abandoned(timedOut: true):
                            return .failure(OperationTimedOut(timeout: limit))
                        case .waiting, .abandoned, .closed:
                            return .failure(CancellationError())
                        }
                    }
                    if let ready { continuation.resume(with: ready) }
                }
            } onCancel: {
                let waiter = guarded.withLock { guarded -> CheckedContinuation<Value, any Error>? in
                    switch guarded.state {
                    case .pending:
                        guarded.state = .abandoned(timedOut: false)
                        abandoned?.abandoned()
                        return nil
                    case .waiting(let continuation):
                        guarded.state = .abandoned(timedOut: false)
                        abandoned?.abandoned()
                        return continuation
                    case .delivered:
                        guarded.state = .closed
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
