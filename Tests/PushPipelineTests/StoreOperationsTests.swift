import APNSCore
import PushCore
import PushStores
import Logging
@testable import PushPipeline
import Synchronization
import Testing

/// Calls that hang and ignore cancellation (a query on a connection that died silently) are
/// abandoned at their time-out, and no more than the bound are left running at once.
@Suite(.timeLimit(.minutes(1)))
struct StoreOperationsTests {
    /// Operations that never end by themselves; ``release()`` ends every one.
    final class Hung: Sendable {
        private let waiting = Mutex<[CheckedContinuation<Void, Never>]>([])
        private let released = Atomic(false)
        let started = Atomic(0)

        func run() async {
            started.add(1, ordering: .relaxed)
            await withCheckedContinuation { continuation in
                let now = waiting.withLock { waiting in
                    if released.load(ordering: .relaxed) { return true }
                    waiting.append(continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        }

        func release() {
            let waiters = waiting.withLock { waiting in
                released.store(true, ordering: .relaxed)
                defer { waiting = [] }
                return waiting
            }
            for waiter in waiters { waiter.resume() }
        }
    }

    /// Operations with at most 3 abandoned, quick backoffs and every failure transient.
    static func operations(timeout: Duration, taskExecutor: (any TaskExecutor)? = nil) -> StoreOperations {
        StoreOperations(
            timeout: timeout,
            maxAbandoned: 3,
            backoff: Backoff(initial: .milliseconds(5), maximum: .milliseconds(10)),
            permanentBackoff: Backoff(initial: .milliseconds(5), maximum: .milliseconds(10)),
            classify: { _ in .transient("test") },
            taskExecutor: taskExecutor,
            metrics: PipelineMetrics(),
            logger: Logger(label: "test")
        )
    }

    /// Returns once `condition` holds, looking every 5 ms for at most 10 s.
    static func waitUntil(_ condition: () -> Bool) async throws {
        for _ in 0..<2_000 where !condition() { try await Task.sleep(for: .milliseconds(5)) }
    }

    @Test func hungCallsAreAbandonedUpToTheBoundAndTheCallSucceedsOnceTheyEnd() async throws {
        let operations = Self.operations(timeout: .milliseconds(20))
        let enforcing = Task { await operations.runTimeLimit() }
        defer { enforcing.cancel() }
        let hung = Hung()
        let result = Task {
            try await operations.run {
                await hung.run()
                return 42
            }
        }
        // Waited for by condition, not for a fixed time: a loaded machine (a parallel `swift
        // test`) may run nothing for half a second.
        try await Self.waitUntil { hung.started.load(ordering: .relaxed) >= 3 }
        try await Task.sleep(for: .milliseconds(200))
        // Ten more time limits went by; only the bound's worth started.
        #expect(hung.started.load(ordering: .relaxed) == 3)
        #expect(operations.abandoned.count == 3)
        hung.release()
        #expect(try await result.value == 42)
        for _ in 0..<200 where operations.abandoned.count > 0 { try await Task.sleep(for: .milliseconds(5)) }
        #expect(operations.abandoned.count == 0, "each abandoned call counted out when it ended")
    }

    /// The task each attempt runs in (so that a time-out need not wait for it) runs on the
    /// executor the operations were given, like the caller.
    @Test func eachAttemptsTaskRunsOnTheGivenExecutor() async throws {
        let executor = QueueTaskExecutor()
        let operations = Self.operations(timeout: .seconds(10), taskExecutor: executor)
        #expect(try await operations.run { executor.isCurrent })
        let unpinned = Self.operations(timeout: .seconds(10))
        #expect(try await !unpinned.run { executor.isCurrent })
    }

    /// Callers that pass the bound's check together must not all be abandoned: the bound holds
    /// at the moment of abandoning, and a full bound is a blocking cause (Herald unready), not a
    /// silent wait.
    @Test func concurrentCallersNeverLeaveMoreThanTheBoundAbandoned() async throws {
        let operations = Self.operations(timeout: .milliseconds(20))
        let enforcing = Task { await operations.runTimeLimit() }
        defer { enforcing.cancel() }
        let hung = Hung()
        let callers = (0..<12).map { caller in
            Task {
                try await operations.run {
                    await hung.run()
                    return caller
                }
            }
        }
        try await Self.waitUntil { operations.blockingCauses == ["abandoned_operations"] }
        try await Task.sleep(for: .milliseconds(200))
        #expect(operations.abandoned.count <= 3, "\(operations.abandoned.count) abandoned with a bound of 3")
        #expect(operations.blockingCauses == ["abandoned_operations"])
        hung.release()
        for (caller, task) in callers.enumerated() { #expect(try await task.value == caller) }
        for _ in 0..<200 where operations.abandoned.count > 0 { try await Task.sleep(for: .milliseconds(5)) }
        #expect(operations.abandoned.count == 0)
        #expect(operations.blockingCauses.isEmpty)
    }
}
