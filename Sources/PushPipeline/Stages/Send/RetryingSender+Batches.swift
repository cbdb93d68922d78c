public import APNSCore
import Synchronization

/// A batch's first attempts in one call to the client (``APNSClientProtocol/sendAll(_:environment:deadline:answered:)``),
/// their answers read where they arrive, and a task only for a request that must wait to be
/// retried (from when the batch's first attempts were all answered, at most the request
/// timeout after they started). The rules are ``RetryingSender/deliver(_:environment:consumedAt:fence:)``'s.
extension RetryingSender {
    /// Delivers every request, each with the rules of
    /// ``deliver(_:environment:consumedAt:fence:)``, and calls `report` once per request with
    /// its index and its outcome, or why it stopped without one (`fence(index)` is asked before
    /// each of its attempts and waited on between them), as each is known: for first answers on
    /// the thread they arrive on.
    /// Returns once every request was reported.
    public func deliverAll(
        _ requests: [(request: APNSRequest, environment: APNSEnvironment)],
        consumedAt: ContinuousClock.Instant,
        fence: @escaping @Sendable (Int) -> SendFence,
        report: @escaping @Sendable (Int, Result<DeliveryOutcome, DeliveryStopped>) -> Void
    ) async {
        guard loadSheddingPause == .zero else {
            // While APNs sheds load each attempt waits its own jittered pause, so one at a time.
            await withDiscardingTaskGroup { group in
                for index in requests.indices {
                    group.addTask { await deliver(requests[index], at: index, consumedAt: consumedAt, fence: fence, report: report) }
                }
            }
            return
        }
        let deadline = consumedAt + policy.deliveryDeadline
        var byClient: [FirstAttempts: [Int]] = [:]
        for (index, (request, environment)) in requests.enumerated() {
            do throws(DeliveryStopped) {
                if let stop = try stopBeforeAttempt(request, history: AttemptHistory(), deadline: deadline, fence: fence(index)) {
                    report(index, .success(stop))
                } else {
                    byClient[FirstAttempts(isChannelRequest: request.isChannelRequest, environment: environment), default: []].append(index)
                }
            } catch {
                report(index, .failure(error))
            }
        }
        // The usual batch has one kind of first attempts: it needs no task of its own.
        let retries = RetriesAfterFirstAnswers<AttemptHistory>()
        await withDiscardingTaskGroup { group in
            for (kind, indexes) in byClient.dropFirst() {
                group.addTask {
                    await sendFirstAttempts(indexes, of: requests, kind: kind, deadline: deadline, retries: retries, report: report)
                }
            }
            if let (kind, indexes) = byClient.first {
                await sendFirstAttempts(indexes, of: requests, kind: kind, deadline: deadline, retries: retries, report: report)
            }
        }
        await retries.sendAgain(report: report) { index, history throws(DeliveryStopped) in
            let (request, environment) = requests[index]
            return try await attempt(request, environment: environment, consumedAt: consumedAt, history: &history, fence: fence(index))
        }
    }

    /// The first attempts of `indexes`, all for one client and endpoint: reports final answers
    /// where they arrive and keeps the others in `retries`.
    private func sendFirstAttempts(
        _ indexes: [Int],
        of requests: [(request: APNSRequest, environment: APNSEnvironment)],
        kind: FirstAttempts,
        deadline: ContinuousClock.Instant,
        retries: RetriesAfterFirstAnswers<AttemptHistory>,
        report: @escaping @Sendable (Int, Result<DeliveryOutcome, DeliveryStopped>) -> Void
    ) async {
        let client = kind.isChannelRequest ? broadcastClient : client
        let sentAt = PipelineClock.now
        let requestDeadline = min(sentAt + policy.requestTimeout, deadline)
        await client.sendAll(indexes.map { requests[$0].request }, environment: kind.environment, deadline: requestDeadline) { position, answer in
            let index = indexes[position]
            var history = AttemptHistory(attempts: 1)
            do throws(DeliveryStopped) {
                guard let outcome = try conclude(answer, sentAt: sentAt, history: &history, isCancelled: Self.isCancellation(answer)) else {
                    return retries.append(index, history)
                }
                report(index, .success(outcome))
            } catch {
                report(index, .failure(error))
            }
        }
    }

    /// The requests of a batch whose first answer calls for a retry, with what it found (APNs'
    /// ``AttemptHistory``, FCM's attempts).
    final class RetriesAfterFirstAnswers<History: Sendable>: Sendable {
        private let retries = Mutex<[(index: Int, history: History)]>([])

        func append(_ index: Int, _ history: History) { retries.withLock { $0.append((index, history)) } }

        /// Sends each request again in a task of its own, its backoff first, from when its
        /// batch was answered: `attempt` goes on from the request's history; each outcome, or
        /// why it stopped without one, goes to `report`. Returns once every one was reported.
        func sendAgain(
            report: @escaping @Sendable (Int, Result<DeliveryOutcome, DeliveryStopped>) -> Void,
            attempt: @escaping @Sendable (Int, inout History) async throws(DeliveryStopped) -> DeliveryOutcome
        ) async {
            await withDiscardingTaskGroup { group in
                for (index, history) in retries.withLock({ $0 }) {
                    group.addTask {
                        var history = history
                        do throws(DeliveryStopped) {
                            report(index, .success(try await attempt(index, &history)))
                        } catch {
                            report(index, .failure(error))
                        }
                    }
                }
            }
        }
    }

    /// The requests whose first attempts share one client and one endpoint.
    private struct FirstAttempts: Hashable {
        var isChannelRequest: Bool
        var environment: APNSEnvironment
    }

    /// Whether a batch's answer is the `CancellationError` of a stream reset because the
    /// caller was cancelled.
    static func isCancellation<Answer>(_ answer: Result<Answer, any Error>) -> Bool {
        if case .failure(let error) = answer { error is CancellationError } else { false }
    }

    private func deliver(
        _ request: (request: APNSRequest, environment: APNSEnvironment),
        at index: Int,
        consumedAt: ContinuousClock.Instant,
        fence: @Sendable (Int) -> SendFence,
        report: @Sendable (Int, Result<DeliveryOutcome, DeliveryStopped>) -> Void
    ) async {
        do throws(DeliveryStopped) {
            report(index, .success(try await deliver(request.request, environment: request.environment, consumedAt: consumedAt, fence: fence(index))))
        } catch {
            report(index, .failure(error))
        }
    }
}
