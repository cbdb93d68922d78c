/// Durations as whole integer units, the one conversion Herald's modules share: integer
/// arithmetic on `Duration`'s components, never through floating-point seconds.
extension Duration {
    /// Whole milliseconds, rounded towards zero.
    package var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    /// Whole nanoseconds, rounded towards zero; durations beyond ten years count as ten years, so
    /// the product cannot overflow (for a deadline that far off, "no deadline" in practice).
    package var wholeNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return min(seconds, 315_360_000) * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
