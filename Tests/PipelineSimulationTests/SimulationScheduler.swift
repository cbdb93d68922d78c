import Dispatch
import Foundation
import MockServerSupport
import PushCore
import PushPipeline
import Synchronization

/// A seeded serial executor with a virtual clock, for the simulation of the shipped pipeline.
///
/// Every task of a simulated world runs on it, one job at a time on one thread of its own; the
/// seed draws the next job from those ready. When none is ready, the clock jumps to the earliest
/// timer and wakes its sleeper. The pipeline reads the time, sleeps, blocks in a rebalance
/// callback and draws its jitter through ``PipelineClock``, bound here to this scheduler. So the
/// seed decides every interleaving and every instant: a seed replays exactly (with
/// `SWIFT_DETERMINISTIC_HASHING=1`, as dictionaries are ordered by a per-process seed
/// otherwise), and a run takes the CPU its work takes, not the time its waits last.
///
/// A callback that blocks (``block(until:isSignalled:)``: the rebalance callback waiting for a
/// drain) runs the other jobs and timers itself, on the same thread, until it is signalled.
final class SimulationScheduler: TaskExecutor, PipelineSimulation {
    private struct Timer {
        var deadline: Duration
        var id: UInt64
        var sleeper: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var ready: [UnownedJob] = []
        /// Ordered by deadline, then by when they were set.
        var timers: [Timer] = []
        /// The virtual time since ``origin``.
        var elapsed: Duration = .zero
        /// The wall clock's steps so far (``stepWallClock(by:)``).
        var wallClockSteps: Duration = .zero
        var random: SeededRandomNumberGenerator
        var nextTimerID: UInt64 = 0
        /// Every choice taken so far, folded: two runs of one seed that took the same steps in
        /// the same order have the same fingerprint.
        var fingerprint: UInt64 = 0xCBF2_9CE4_8422_2325
        var steps = 0
        /// The driving thread waits for a job enqueued from outside (the world's first).
        var driverIsWaiting = false
        var isStopping = false
        var summaryOfRun = Summary(steps: 0, elapsed: .zero, fingerprint: 0)
        /// Resumed when the driving thread ended.
        var stopped: CheckedContinuation<Void, Never>?

        /// Folds a choice into ``fingerprint`` (FNV-1a's step).
        mutating func fold(_ choice: UInt64) {
            fingerprint = (fingerprint ^ choice) &* 0x0100_0000_01B3
        }
    }

    /// Virtual time zero, as an instant of the continuous clock (the type the pipeline's
    /// deadlines have).
    let origin = ContinuousClock.now
    private let state: Mutex<State>
    private let outsideJob = DispatchSemaphore(value: 0)

    /// The wall clock at virtual time zero, in milliseconds since 1970.
    let wallClockStart: Int64

    /// The seed the scheduler draws by.
    let seed: UInt64

    init(seed: UInt64, wallClockStart: Int64) {
        self.seed = seed
        self.wallClockStart = wallClockStart
        state = Mutex(State(random: SeededRandomNumberGenerator(seed: seed ^ 0x2545_F491_4F6C_DD1D)))
    }

    /// Steps the wall clock by `offset` (negative: back), as an NTP correction does; the
    /// continuous clock goes on.
    func stepWallClock(by offset: Duration) {
        state.withLock { $0.wallClockSteps += offset }
    }

    /// A run's steps, its virtual time and the fingerprint of its choices.
    struct Summary: Equatable, CustomStringConvertible {
        var steps: Int
        var elapsed: Duration
        var fingerprint: UInt64

        var description: String { "\(steps) steps, \(elapsed) of virtual time, fingerprint \(fingerprint)" }
    }

    /// The summary of ``run(_:)``'s body, once it returned.
    var summaryOfRun: Summary { state.withLock { $0.summaryOfRun } }

    /// Runs `body` on this executor with its clock bound, driven by a thread of its own; returns
    /// once `body` returned and every timer it left behind has fired (within a minute of virtual
    /// time: a loop left running is not waited for).
    func run<Value: Sendable>(_ body: @escaping @Sendable () async throws -> Value) async throws -> Value {
        let driver = Thread { self.drive() }
        driver.stackSize = 16 << 20
        driver.start()
        let outcome: Result<Value, any Error>
        do {
            outcome = .success(
                try await withTaskExecutorPreference(self) {
                    try await PipelineClock.$simulation.withValue(self) { try await body() }
                })
        } catch {
            outcome = .failure(error)
        }
        state.withLock { $0.summaryOfRun = Summary(steps: $0.steps, elapsed: $0.elapsed, fingerprint: $0.fingerprint) }
        await withCheckedContinuation { stopped in stop(then: stopped) }
        return try outcome.get()
    }

    // MARK: TaskExecutor

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let wake = state.withLock { state in
            state.ready.append(job)
            defer { state.driverIsWaiting = false }
            return state.driverIsWaiting
        }
        if wake { outsideJob.signal() }
    }

    // MARK: PipelineSimulation

    var now: ContinuousClock.Instant { origin + state.withLock { $0.elapsed } }

    var wallMilliseconds: Int64 {
        wallClockStart + state.withLock { ($0.elapsed + $0.wallClockSteps).wholeMilliseconds }
    }

    func sleep(until deadline: ContinuousClock.Instant) async throws {
        let at = origin.duration(to: deadline)
        let id = state.withLock { state in
            state.nextTimerID += 1
            return state.nextTimerID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (sleeper: CheckedContinuation<Void, any Error>) in
                let isSet = state.withLock { state in
                    guard !Task.isCancelled else { return false }
                    let timer = Timer(deadline: max(at, state.elapsed), id: id, sleeper: sleeper)
                    let index = state.timers.firstIndex { $0.deadline > timer.deadline } ?? state.timers.endIndex
                    state.timers.insert(timer, at: index)
                    return true
                }
                if !isSet { sleeper.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let cancelled = state.withLock { state in
                state.timers.firstIndex { $0.id == id }.map { state.timers.remove(at: $0) }
            }
            cancelled?.sleeper.resume(throwing: CancellationError())
        }
    }

    func block(until deadline: ContinuousClock.Instant, isSignalled: () -> Bool) -> Bool {
        let limit = origin.duration(to: deadline)
        while !isSignalled() {
            if !step(notAfter: limit) { return isSignalled() }
        }
        return true
    }

    func nextRandom() -> UInt64 { state.withLock { $0.random.next() } }

    // MARK: Driving

    private enum Step {
        case job(UnownedJob)
        case timer(CheckedContinuation<Void, any Error>)
        case none
    }

    /// Runs one ready job (the seed draws which), or else moves the clock to the earliest timer
    /// not after `limit` and wakes its sleeper; false when there is neither (the clock is then
    /// moved to `limit`).
    private func step(notAfter limit: Duration?) -> Bool {
        let next = state.withLock { state -> Step in
            state.steps += 1
            if !state.ready.isEmpty {
                let index = Int(state.random.next() % UInt64(state.ready.count))
                state.fold(UInt64(state.ready.count << 32 | index))
                state.ready.swapAt(index, state.ready.count - 1)
                return .job(state.ready.removeLast())
            }
            if let first = state.timers.first, limit.map({ first.deadline <= $0 }) ?? true {
                state.timers.removeFirst()
                state.elapsed = max(state.elapsed, first.deadline)
                state.fold(UInt64(truncatingIfNeeded: state.elapsed.wholeNanoseconds))
                return .timer(first.sleeper)
            }
            state.steps -= 1
            if let limit { state.elapsed = max(state.elapsed, limit) }
            return .none
        }
        switch next {
        case .job(let job):
            job.runSynchronously(on: asUnownedTaskExecutor())
            return true
        case .timer(let sleeper):
            sleeper.resume()
            return true
        case .none:
            return false
        }
    }

    /// The driving thread: steps until stopped, waiting only for a job from outside (the world's
    /// first, and the runner's return) when nothing is ready and no timer is set. Once stopped,
    /// the timers left within a minute fire; those left after it are cancelled.
    private func drive() {
        var stopLimit: Duration?
        while true {
            if step(notAfter: stopLimit) { continue }
            let stopping = state.withLock { state in
                if state.isStopping { return true }
                state.driverIsWaiting = true
                return false
            }
            if !stopping {
                // Only the world's first job and the runner's stop come from outside: a long
                // wait otherwise means every task of the world waits for another and no timer
                // is set, which no seed can ever end.
                if outsideJob.wait(timeout: .now() + .seconds(60)) == .timedOut {
                    let elapsed = state.withLock { $0.elapsed }
                    fatalError("seed \(seed) stalled at \(elapsed) of virtual time: every task waits, and no timer is set")
                }
            } else if stopLimit == nil {
                stopLimit = state.withLock { $0.elapsed } + .seconds(60)
            } else {
                break
            }
        }
        let (left, stopped) = state.withLock { state in
            defer { state.timers = [] }
            return (state.timers, state.stopped)
        }
        for timer in left { timer.sleeper.resume(throwing: CancellationError()) }
        while step(notAfter: stopLimit) {}
        stopped?.resume()
    }

    /// Stops the driving thread; `stopped` is resumed when it ended.
    private func stop(then stopped: CheckedContinuation<Void, Never>) {
        let wake = state.withLock { state in
            state.isStopping = true
            state.stopped = stopped
            defer { state.driverIsWaiting = false }
            return state.driverIsWaiting
        }
        if wake { outsideJob.signal() }
    }
}
