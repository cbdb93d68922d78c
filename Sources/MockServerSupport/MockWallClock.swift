#if canImport(CoreFoundation)
import CoreFoundation
#endif
import Foundation

/// The mocks' wall clock as whole milliseconds (`clock_gettime`, not `Date`'s `Double`):
/// timestamps (a 410's, a token's expiry) are integers from the clock on. The mocks share no
/// module with Herald on purpose.
public enum MockWallClock {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    public static func millisecondsSince1970() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Int64(time.tv_sec) * 1000 + Int64(time.tv_nsec) / 1_000_000
    }
}
