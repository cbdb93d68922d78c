import Dispatch
import PushCore

/// What a deterministic simulation of the pipeline replaces: the time it reads, its timers, the
/// rebalance callback's blocking wait for a drain, and the random draws of its jitter. Bound for
/// the tasks of a simulated member with ``PipelineClock/simulation``; the tests' seeded serial
/// executor implements it.
package protocol PipelineSimulation: Sendable {
    /// The simulated now.
    var now: ContinuousClock.Instant { get }
    /// Returns at simulated `deadline`; throws `CancellationError` when the task is cancelled first.
    func sleep(until deadline: ContinuousClock.Instant) async throws
    /// Runs the simulation's other work until `isSignalled()` holds (true) or `deadline` passed
    /// (false): the blocking wait of a callback that runs inside the simulation.
    func block(until deadline: ContinuousClock.Instant, isSignalled: () -> Bool) -> Bool
    /// The next random 64 bits, in the simulation's order.
    func nextRandom() -> UInt64
    /// The simulated wall clock, in milliseconds since 1970 (it may jump, as a stepped clock does).
    var wallMilliseconds: Int64 { get }
}

/// The clock every timing decision of the pipeline reads and sleeps by (deadlines, backoffs,
/// pauses, pacing, time limits, commit intervals, the drain's bound): ``ContinuousClock``, unless
/// a simulation is bound to the task (``simulation``); and the wall clock it reads
/// (``wallMilliseconds``).
///
/// A task-local rather than an initialiser argument: it reaches every child task and every value
/// that reads the time or draws a jitter (retry loops, gates, the pacer) without one more argument
/// through each, and librdkafka's rebalance thread, outside any task, reads the continuous clock.
/// Reading it costs one task-local lookup beside the clock read.
package struct PipelineClock: Clock {
    package typealias Instant = ContinuousClock.Instant

    /// The simulation the current task runs in; nil in production.
    @TaskLocal package static var simulation: (any PipelineSimulation)?

    package init() {}

    package static var now: Instant { simulation?.now ?? ContinuousClock.now }

    package var now: Instant { Self.now }

    /// The wall clock the pipeline stamps results with and takes an untimed record's ledger day
    /// from, in milliseconds since 1970: ``WallClock``, or the bound simulation's.
    package static var wallMilliseconds: Int64 { simulation?.wallMilliseconds ?? WallClock.millisecondsSince1970() }

    package var minimumResolution: Duration { ContinuousClock().minimumResolution }

    package func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        if let simulation = Self.simulation {
            try await simulation.sleep(until: deadline)
        } else {
            try await ContinuousClock().sleep(until: deadline, tolerance: tolerance)
        }
    }

    /// Blocks the calling thread, which must not be one of the cooperative pool's, until
    /// `semaphore` is signalled (true) or `deadline` passed (false). In a simulation the
    /// simulation's other work runs meanwhile.
    func wait(for semaphore: DispatchSemaphore, until deadline: Instant) -> Bool {
        if let simulation = Self.simulation {
            // Time zero is DISPATCH_TIME_NOW: a check that never sleeps (`.now()` is a timed
            // wait, which sleeps for the timer slack).
            return simulation.block(until: deadline) { semaphore.wait(timeout: DispatchTime(uptimeNanoseconds: 0)) == .success }
        }
        let left = max(Self.now.duration(to: deadline), .zero)
        return semaphore.wait(timeout: .now() + .nanoseconds(Int(left.wholeNanoseconds))) == .success
    }
}

/// The pipeline's random draws (backoff and pause jitter): the system generator, or the bound
/// simulation's (``PipelineClock/simulation``), so a seed replays them.
package struct PipelineRandom: RandomNumberGenerator {
    private var system = SystemRandomNumberGenerator()

    package init() {}

    package mutating func next() -> UInt64 {
        PipelineClock.simulation?.nextRandom() ?? system.next()
    }
}
