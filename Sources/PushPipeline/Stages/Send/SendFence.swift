/// What one send asks before each of its attempts and waits on between them. The pipeline closes
/// it once the message's partition is revoked or being drained (the new owner delivers it), and
/// a wait ends as soon as it closes, so a rebalance never waits for a retry's backoff.
public struct SendFence: Sendable {
    /// Whether no further attempt may start.
    let isClosed: @Sendable () -> Bool
    /// Waits `duration` before the next attempt, or less once the fence closes; `refused` says
    /// the last attempt was answered with a refusal (nothing was delivered), so the send need not
    /// hold a send permit while it waits. Throws only when cancelled.
    let wait: @Sendable (_ duration: Duration, _ refused: Bool) async throws(CancellationError) -> Void

    public init(
        isClosed: @escaping @Sendable () -> Bool,
        wait: @escaping @Sendable (_ duration: Duration, _ refused: Bool) async throws(CancellationError) -> Void
    ) {
        self.isClosed = isClosed
        self.wait = wait
    }

    /// A fence that never closes: every wait lasts its whole duration.
    public static let open = SendFence(isClosed: { false }, wait: { duration, _ throws(CancellationError) in try await RetryAttempts.wait(duration) })

    /// A fence closed when `isClosed` says so, whose waits last their whole duration.
    public static func checking(_ isClosed: @escaping @Sendable () -> Bool) -> SendFence {
        SendFence(isClosed: isClosed, wait: open.wait)
    }
}
