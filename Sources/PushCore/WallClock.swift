#if canImport(Glibc)
import Glibc
#else
import Darwin
#endif

/// The wall clock read as whole numbers (`clock_gettime`), never through `Date`'s `Double`
/// seconds: timestamps Herald writes and compares are integers from the clock on.
public enum WallClock {
    /// Microseconds since 1970-01-01T00:00:00Z.
    public static func microsecondsSince1970() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Int64(time.tv_sec) * 1_000_000 + Int64(time.tv_nsec) / 1000
    }

    /// Milliseconds since 1970-01-01T00:00:00Z.
    public static func millisecondsSince1970() -> Int64 {
        microsecondsSince1970() / 1000
    }

    /// Seconds since 1970-01-01T00:00:00Z (a provider token's `iat`).
    public static func secondsSince1970() -> Int64 {
        microsecondsSince1970() / 1_000_000
    }
}
