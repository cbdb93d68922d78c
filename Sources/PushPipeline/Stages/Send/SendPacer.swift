import Synchronization

/// Spaces sends evenly at a fixed rate (HERALD_BULK_MAX_RATE for the bulk lane): the n-th send
/// after an idle spell goes n intervals after the first, so a campaign never bursts at the start
/// of a second, and time spent idle is not saved up for a burst later.
final class SendPacer: Sendable {
    /// The schedule as a value: each call reserves the next free slot.
    struct Schedule {
        /// Time between two sends.
        let interval: Duration
        /// The earliest instant the next send may go.
        private(set) var nextSlot: ContinuousClock.Instant?

        init(perSecond rate: Int) {
            interval = .nanoseconds(1_000_000_000 / Int64(max(rate, 1)))
        }

        /// Reserves the next slot for a send asking at `now`: returns how long it waits for it.
        mutating func reserve(at now: ContinuousClock.Instant) -> Duration {
            let slot = max(nextSlot ?? now, now)
            nextSlot = slot + interval
            return now.duration(to: slot)
        }
    }

    /// Waits shorter than this are not slept: a sleep costs more than it spaces.
    private static let shortestSleep = Duration.milliseconds(1)
    private let schedule: Mutex<Schedule>

    /// Paces at `rate` sends per second.
    init(perSecond rate: Int) {
        schedule = Mutex(Schedule(perSecond: rate))
    }

    /// Reserves the caller's slot: how long it waits for it (zero when that is too short to sleep).
    func reserveSlot() -> Duration {
        let wait = schedule.withLock { $0.reserve(at: PipelineClock.now) }
        return wait >= Self.shortestSleep ? wait : .zero
    }
}
