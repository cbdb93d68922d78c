import Foundation
import Synchronization

/// How the whole sender slows down while APNs sheds load (500, 503, lost connections, timeouts).
///
/// Each such answer doubles a shared pause (starting at `initialPause`, capped at `maximumPause`);
/// the pause halves every `halfLife` without new trouble. Every new attempt of every notification
/// first waits a jittered share of the current pause, so a struggling APNs sees fewer requests
/// while a healthy one sees no delay at all. 429 TooManyRequests concerns one device token and
/// never engages the gate.
public struct LoadSheddingPolicy: Sendable, Hashable {
    /// The pause after the first overload answer; default 50 ms.
    public var initialPause: Duration
    /// The longest pause; default 2 s.
    public var maximumPause: Duration
    /// Time for the pause to halve without new overload answers; default 1 s.
    public var halfLife: Duration

    /// - Parameters: see the properties; `maximumPause` of zero disables the gate.
    public init(
        initialPause: Duration = .milliseconds(50),
        maximumPause: Duration = .seconds(2),
        halfLife: Duration = .seconds(1)
    ) {
        self.initialPause = max(initialPause, .zero)
        self.maximumPause = max(maximumPause, .zero)
        self.halfLife = max(halfLife, .milliseconds(1))
    }

    /// A gate that never pauses.
    public static let disabled = LoadSheddingPolicy(initialPause: .zero, maximumPause: .zero)

    var isEnabled: Bool { maximumPause > .zero && initialPause > .zero }
}

/// The shared, decaying pause of ``LoadSheddingPolicy``, safe to use from many tasks at once.
/// Generic over the clock so tests control time.
package final class LoadSheddingGate<C: Clock>: Sendable where C.Duration == Duration {
    /// A decayed pause below this is treated as none.
    static var negligiblePause: Duration { .microseconds(500) }

    private struct State {
        /// The pause as it was at `setAt`.
        var pause: Duration = .zero
        var setAt: C.Instant?
    }

    private let policy: LoadSheddingPolicy
    private let clock: C
    private let state = Mutex(State())

    public init(policy: LoadSheddingPolicy, clock: C) {
        self.policy = policy
        self.clock = clock
    }

    /// The pause new attempts wait now (before jitter); zero while APNs is healthy.
    public var currentPause: Duration {
        let now = clock.now
        return state.withLock { Self.decayed($0, at: now, halfLife: policy.halfLife) }
    }

    /// APNs answered 500 or 503, or a connection failed or timed out: doubles the pause.
    public func recordOverload() {
        guard policy.isEnabled else { return }
        let now = clock.now
        state.withLock { state in
            let current = Self.decayed(state, at: now, halfLife: policy.halfLife)
            state.pause = min(policy.maximumPause, max(policy.initialPause, current * 2))
            state.setAt = now
        }
    }

    /// How long a new attempt waits now: a uniformly drawn 50 to 100 % of the current pause,
    /// never beyond `deadline`; zero when there is no pause.
    public func pause(until deadline: C.Instant, using generator: inout some RandomNumberGenerator) -> Duration {
        let pause = currentPause
        guard pause > .zero else { return .zero }
        let now = clock.now
        let jittered = pause * Double.random(in: 0.5...1.0, using: &generator)
        return max(.zero, min(jittered, now.duration(to: deadline)))
    }

    private static func decayed(_ state: State, at now: C.Instant, halfLife: Duration) -> Duration {
        guard let setAt = state.setAt, state.pause > .zero else { return .zero }
        let elapsed = max(setAt.duration(to: now), .zero)
        let pause = state.pause * exp2(-(elapsed / halfLife))
        return pause < negligiblePause ? .zero : pause
    }
}
