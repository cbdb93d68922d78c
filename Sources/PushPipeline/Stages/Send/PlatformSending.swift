import PushCore
import PushStores

/// One platform's part in the attempt loop FCM and web push share
/// (``RetryingSender/deliverAll(_:via:consumedAt:fence:report:)``): how a request is sent,
/// how an answer is read, and what may hold an attempt back. APNs keeps a loop of its own: its
/// load shedding holds the send permit while it waits, and its first attempts go out in batches
/// per connection and endpoint.
protocol PlatformSending: Sendable {
    associatedtype Request: Sendable
    associatedtype Response: Sendable
    associatedtype History: PlatformAttemptHistory

    /// Sends one attempt of `request`, answered by `deadline`.
    func send(_ request: Request, deadline: ContinuousClock.Instant) async throws -> Response

    /// Sends every request at once and calls `answered` with each one's index and answer.
    func sendAll(
        _ requests: [Request],
        deadline: ContinuousClock.Instant,
        answered: @escaping @Sendable (Int, Result<Response, any Error>) -> Void
    ) async

    /// Reads the answer to the attempt counted last in `history`, sent at `sentAtMilliseconds` of
    /// the wall clock: the final outcome, or nil when another attempt may follow (its wait no
    /// shorter than `history.notBefore`); throws ``DeliveryStopped/cancelled`` when the sending
    /// task was cancelled before a final answer.
    func conclude(
        _ answer: Result<Response, any Error>,
        of request: Request,
        sentAtMilliseconds: Int64,
        history: inout History,
        isCancelled: Bool
    ) throws(DeliveryStopped) -> DeliveryOutcome?

    /// The request's `expiration` in UNIX seconds (nil or 0: it never expires here).
    func expiration(of request: Request) -> Int64?

    /// How long the next attempt of `request` must wait before it starts, holding no send permit
    /// (FCM: its project's gate); zero: it may start now.
    func pause(_ request: Request, until deadline: ContinuousClock.Instant) -> Duration

    /// Counts the retry that follows the attempts `history` holds.
    func recordRetry(after history: History)
}

/// What the attempts of one request found so far, as the shared attempt loop reads it.
protocol PlatformAttemptHistory: Sendable {
    init()
    var attempts: Int { get set }
    var retries: RetryAttempts { get set }
    /// The least wait before the next attempt that the last answer asked for.
    var notBefore: Duration? { get }
    /// Whether the last attempt was answered: it then delivered nothing, and its wait needs no
    /// send permit.
    var lastWasAnswered: Bool { get }
    /// The outcome with what the last answer said (`reason` instead of its reason when given).
    func outcome(_ status: DeviceResult.Status, reason: String?) -> DeliveryOutcome
}

extension RetryingSender {
    /// Delivers every request through `platform`, and calls `report` once per request with its
    /// index and its outcome, or why it stopped without one (`fence(index)` is asked before each
    /// of its attempts and waited on between them), as each is known: for first answers on the
    /// thread they arrive on. The first attempts go out as one batch; a request to retry, or one
    /// whose first attempt must pause, waits in a task of its own, from when the batch was
    /// answered. Returns once every request was reported.
    func deliverAll<Platform: PlatformSending>(
        _ requests: [Platform.Request],
        via platform: Platform,
        consumedAt: ContinuousClock.Instant,
        fence: @escaping @Sendable (Int) -> SendFence,
        report: @escaping @Sendable (Int, Result<DeliveryOutcome, DeliveryStopped>) -> Void
    ) async {
        let deadline = consumedAt + policy.deliveryDeadline
        let retries = RetriesAfterFirstAnswers<Platform.History>()
        let first = requests.indices.filter { index in
            guard platform.pause(requests[index], until: deadline) == .zero else {
                retries.append(index, Platform.History())
                return false
            }
            do throws(DeliveryStopped) {
                guard let stop = try stopBeforeAttempt(requests[index], via: platform, history: Platform.History(), deadline: deadline, fence: fence(index))
                else { return true }
                report(index, .success(stop))
            } catch {
                report(index, .failure(error))
            }
            return false
        }
        if !first.isEmpty {
            let sentAtMilliseconds = epochMilliseconds()
            let requestDeadline = min(PipelineClock.now + policy.requestTimeout, deadline)
            await platform.sendAll(first.map { requests[$0] }, deadline: requestDeadline) { position, answer in
                let index = first[position]
                var history = Platform.History()
                history.attempts = 1
                do throws(DeliveryStopped) {
                    let isCancelled = Self.isCancellation(answer)
                    if let outcome = try platform.conclude(
                        answer, of: requests[index], sentAtMilliseconds: sentAtMilliseconds, history: &history, isCancelled: isCancelled)
                    {
                        report(index, .success(outcome))
                    } else {
                        retries.append(index, history)
                    }
                } catch {
                    report(index, .failure(error))
                }
            }
        }
        await retries.sendAgain(report: report) { index, history throws(DeliveryStopped) in
            try await attempt(requests[index], via: platform, consumedAt: consumedAt, history: &history, fence: fence(index))
        }
    }

    /// Attempts `request` until a final outcome, after the attempts `history` holds (after an
    /// answer to retry, its wait comes first).
    func attempt<Platform: PlatformSending>(
        _ request: Platform.Request,
        via platform: Platform,
        consumedAt: ContinuousClock.Instant,
        history: inout Platform.History,
        fence: SendFence
    ) async throws(DeliveryStopped) -> DeliveryOutcome {
        let deadline = consumedAt + policy.deliveryDeadline
        while true {
            if history.attempts > 0 {
                let wait = max(history.retries.delayAfterFailure(policy.backoff), history.notBefore ?? .zero)
                guard history.attempts < policy.maxAttempts, PipelineClock.now + wait < deadline else {
                    return history.outcome(.failed, reason: nil)
                }
                if hasExpired(platform.expiration(of: request), inAbout: wait) { return history.outcome(.expired, reason: nil) }
                platform.recordRetry(after: history)
                // An answered attempt (429, 5xx) delivered nothing: its send waits without a permit.
                if !fence.isClosed() {
                    do { try await fence.wait(wait, history.lastWasAnswered) } catch { throw .cancelled }
                }
            }
            // A paused attempt waits without a permit: nothing of it is in flight.
            let paused = platform.pause(request, until: deadline)
            if paused > .zero, !fence.isClosed() {
                do { try await fence.wait(paused, true) } catch { throw .cancelled }
            }
            if let stop = try stopBeforeAttempt(request, via: platform, history: history, deadline: deadline, fence: fence) { return stop }
            history.attempts += 1
            let sentAtMilliseconds = epochMilliseconds()
            let answer: Result<Platform.Response, any Error>
            do {
                answer = .success(try await platform.send(request, deadline: min(PipelineClock.now + policy.requestTimeout, deadline)))
            } catch {
                answer = .failure(error)
            }
            if let outcome = try platform.conclude(
                answer, of: request, sentAtMilliseconds: sentAtMilliseconds, history: &history, isCancelled: Task.isCancelled)
            {
                return outcome
            }
        }
    }

    /// The outcome when the next attempt must not start: `expired`, `failed` at the deadline;
    /// throws ``DeliveryStopped/fenced`` once `fence` is closed.
    private func stopBeforeAttempt<Platform: PlatformSending>(
        _ request: Platform.Request,
        via platform: Platform,
        history: Platform.History,
        deadline: ContinuousClock.Instant,
        fence: SendFence
    ) throws(DeliveryStopped) -> DeliveryOutcome? {
        let expired = hasExpired(platform.expiration(of: request), inAbout: .zero)
        return try Self.stopStatus(expired: expired, deadline: deadline, fence: fence).map { history.outcome($0, reason: nil) }
    }

    /// Whether `expiration` (UNIX seconds; nil or 0 never expires here) will have passed `delay`
    /// from now.
    func hasExpired(_ expiration: Int64?, inAbout delay: Duration) -> Bool {
        guard let expiration, expiration > 0 else { return false }
        return epochMilliseconds() + delay.wholeMilliseconds >= expiration * 1000
    }
}
