public import APNSCore
import Synchronization

/// A batch's first attempts in one call to the client (``APNSClientProtocol/sendAll(_:environment:deadline:answered:)``),
/// their answers read where they arrive, and a task only for a request that must wait to be
/// retried. The rules are ``NotificationSender/deliver(_:environment:consumedAt:unless:)``'s.
extension NotificationSender {
    /// Delivers every request, each with the rules of
    /// ``deliver(_:environment:consumedAt:unless:)``, and calls `report` once per request with
    /// its index and its outcome, or why it stopped without one (`fenced(index)` is asked before
    /// each of its attempts), as each is known: for first answers on the thread they arrive on.
    /// Returns once every request was reported.
    public func deliverAll(
        _ requests: [(request: APNSRequest, environment: APNSEnvironment)],
        consumedAt: ContinuousClock.Instant,
        unless fenced: @escaping @Sendable (Int) -> Bool,
        report: @escaping @Sendable (Int, Result<DeliveryOutcome, DeliveryStopped>) -> Void
    ) async {
        guard requests.count > 1, loadSheddingPause == .zero else {
            // While APNs sheds load each attempt waits its own jittered pause, so one at a time.
            await withDiscardingTaskGroup { group in
                for index in requests.indices {
                    group.addTask { await deliver(requests[index], at: index, consumedAt: consumedAt, unless: fenced, report: report) }
                }
            }
            return
        }
        let deadline = consumedAt + policy.deliveryDeadline
        var byClient: [FirstAttempts: [Int]] = [:]
        for (index, (request, environment)) in requests.enumerated() {
            do throws(DeliveryStopped) {
                if let stop = try stopBeforeAttempt(request, history: AttemptHistory(), deadline: deadline, unless: { fenced(index) }) {
                    report(index, .success(stop))
                } else {
                    byClient[FirstAttempts(isChannelRequest: request.isChannelRequest, environment: environment), default: []].append(index)
                }
            } catch {
                report(index, .failure(error))
            }
        }
        // Answers to retry go to a task each, as they arrive; a cancelled batch reports those
        // it never took as cancelled.
        let firstAttempts = byClient
        let toRetry = RetryHistories()
        let (retries, retrySink) = AsyncStream.makeStream(of: Int.self)
        await withDiscardingTaskGroup { group in
            group.addTask {
                await withDiscardingTaskGroup { sends in
                    for (kind, indexes) in firstAttempts {
                        sends.addTask {
                            let client = kind.isChannelRequest ? broadcastClient : client
                            let sentAt = ContinuousClock.now
                            let requestDeadline = min(sentAt + policy.requestTimeout, deadline)
                            await client.sendAll(indexes.map { requests[$0].request }, environment: kind.environment, deadline: requestDeadline) {
                                position, answer in
                                let index = indexes[position]
                                var history = AttemptHistory(attempts: 1)
                                do throws(DeliveryStopped) {
                                    if let outcome = try conclude(answer, sentAt: sentAt, history: &history, isCancelled: Self.isCancellation(answer)) {
                                        report(index, .success(outcome))
                                        return
                                    }
                                } catch {
                                    report(index, .failure(error))
                                    return
                                }
                                toRetry.keep(history, for: index)
                                retrySink.yield(index)
                            }
                        }
                    }
                }
                retrySink.finish()
            }
            for await index in retries {
                guard var history = toRetry.take(index) else { continue }
                group.addTask {
                    let (request, environment) = requests[index]
                    do throws(DeliveryStopped) {
                        let outcome = try await attempt(request, environment: environment, consumedAt: consumedAt, history: &history) { fenced(index) }
                        report(index, .success(outcome))
                    } catch {
                        report(index, .failure(error))
                    }
                }
            }
        }
        for index in toRetry.remaining { report(index, .failure(.cancelled)) }
    }

    /// The histories of the answers waiting for a retry task, by request index.
    private final class RetryHistories: Sendable {
        private let byIndex = Mutex<[Int: AttemptHistory]>([:])

        func keep(_ history: AttemptHistory, for index: Int) { byIndex.withLock { $0[index] = history } }

        func take(_ index: Int) -> AttemptHistory? { byIndex.withLock { $0.removeValue(forKey: index) } }

        var remaining: [Int] { byIndex.withLock { Array($0.keys) } }
    }

    /// The requests whose first attempts share one client and one endpoint.
    private struct FirstAttempts: Hashable {
        var isChannelRequest: Bool
        var environment: APNSEnvironment
    }

    private static func isCancellation(_ answer: Result<APNSResponse, any Error>) -> Bool {
        if case .failure(let error) = answer { error is CancellationError } else { false }
    }

    private func deliver(
        _ request: (request: APNSRequest, environment: APNSEnvironment),
        at index: Int,
        consumedAt: ContinuousClock.Instant,
        unless fenced: @Sendable (Int) -> Bool,
        report: @Sendable (Int, Result<DeliveryOutcome, DeliveryStopped>) -> Void
    ) async {
        do throws(DeliveryStopped) {
            report(index, .success(try await deliver(request.request, environment: request.environment, consumedAt: consumedAt) { fenced(index) }))
        } catch {
            report(index, .failure(error))
        }
    }
}
