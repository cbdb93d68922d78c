import PushCore
import PushCore
package import NIOCore

extension NIODeadline {
    /// The NIO deadline for a `ContinuousClock` instant, or nil when it already passed.
    package static func fromContinuousClock(_ instant: ContinuousClock.Instant) -> NIODeadline? {
        let remaining = ContinuousClock.now.duration(to: instant)
        guard remaining > .zero else { return nil }
        return .now() + .nanoseconds(remaining.wholeNanoseconds)
    }
}
