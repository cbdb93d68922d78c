import HTTP2TLS
import PushCore
public import FCMCore
import NIOCore
import Synchronization
import HTTP2Transport

/// A batch of messages started as one ``HTTP2StreamBatch``, as APNs' are: the streams free now
/// are leased in one lock section, each connection gets its share in one hop to its event loop,
/// the rest wait in the pool for a stream, and the answers are read and handed to the caller
/// there, with no task or continuation per message.
extension FCMHTTPClient {
    /// Sends every request, calling `answered` on the connections' event loops; a message that
    /// finds no free stream waits in the pool without a task and starts where a stream is freed.
    /// What cannot take that path (no credential, no valid access token at hand, no stream before
    /// the deadline, a stream that could not be opened) goes through ``send(_:deadline:)`` in a
    /// child task, and so does a message refused with 401 UNAUTHENTICATED, once, after its access
    /// token was invalidated.
    public func sendAll(
        _ requests: [FCMRequest],
        deadline: ContinuousClock.Instant,
        answered: @escaping @Sendable (Int, Result<FCMResponse, any Error>) -> Void
    ) async {
        // Past the deadline or cancelled: the single path says so per request.
        let nioDeadline = Task.isCancelled ? nil : NIODeadline.fromContinuousClock(deadline)
        let (leased, waiting, alone) = nioDeadline == nil ? ([], [], Array(requests.indices)) : leaseFreeStreams(for: requests)
        let (deadlineOfStreams, sentAt) = (nioDeadline ?? .now(), ContinuousClock.now)
        // A batch comes from one lane: its first request's precedence is every request's.
        let precedence = requests.first?.precedence ?? .urgent
        let pools = Batch.Pools(
            wait: { waiters in
                self.transport.wait(waiters.map { (endpoint: .sole, waiter: $0.waiter) }, deadline: deadlineOfStreams, precedence: precedence)
            },
            stopWaiting: { waiters in self.transport.stopWaiting(waiters.map { (endpoint: .sole, id: $0.id) }) }
        )
        await Batch.send(
            leased,
            waiting: waiting,
            deadline: deadlineOfStreams,
            alone: alone.map { FCMSingleSend(index: $0, refused: nil) },
            pools: pools
        ) { stream, result in
            self.transport.release(stream.connection, status: try? result.get().status)
            switch result {
            case .success(let answer):
                let response = self.response(to: answer, sentAt: sentAt)
                if response.decision == .refreshAccessToken { return FCMSingleSend(index: stream.index, refused: stream.context) }
                self.logAnswer(response, to: requests[stream.index])
                answered(stream.index, .success(response))
            case .failure(is HTTP2StreamNotOpened):
                return FCMSingleSend(index: stream.index, refused: nil)
            case .failure(let error):
                let failure = self.failure(error, sentAt: sentAt, deadline: deadline)
                // Reset because the caller was cancelled: as the single path, a cancellation.
                answered(stream.index, .failure(error is CancellationError && ContinuousClock.now < deadline ? error : failure))
            }
            return nil
        } retry: { retry in
            if let refused = retry.refused { self.tokens.invalidate(refused.token, projectID: refused.projectID) }
            do {
                answered(retry.index, .success(try await self.send(requests[retry.index], deadline: deadline, refreshed: retry.refused != nil)))
            } catch {
                answered(retry.index, .failure(error))
            }
        }
    }

    private typealias Batch = HTTP2StreamBatch<FCMConnection, SentWith, FCMSingleSend>

    /// The project and access token a message was sent with.
    private struct SentWith: Sendable {
        var projectID: String
        var token: FCMAccessTokenSource.AccessToken
    }

    /// A message of a batch to send again through the single path.
    private struct FCMSingleSend: Sendable {
        var index: Int
        /// What the message was refused with (401 UNAUTHENTICATED): the token to invalidate
        /// before the one retry with a new one; nil when it was not sent.
        var refused: SentWith?
    }

    /// The HTTP/2 request of each message whose project has a valid access token now, with a
    /// stream as far as streams are free (one lock section), else to wait for one; the indexes
    /// of the rest.
    private func leaseFreeStreams(for requests: [FCMRequest]) -> (leased: [Batch.Leased], waiting: [Batch.Waiting], rest: [Int]) {
        let accounts = credentials.withLock { credentials in requests.map { credentials.serviceAccount(for: $0.package) } }
        var projects: [String: (path: String, token: FCMAccessTokenSource.AccessToken)?] = [:]
        var sendable: [(index: Int, project: SentWith, path: String)] = []
        var rest: [Int] = []
        for (index, account) in accounts.enumerated() {
            // No credential, or no token without waiting: the single path answers or waits.
            guard let projectID = account?.projectID else {
                rest.append(index)
                continue
            }
            if projects[projectID] == nil {
                projects[projectID] = .some(tokens.validAccessToken(projectID: projectID).map { (sendPath(projectID: projectID), $0) })
            }
            guard let project = projects[projectID] ?? nil else {
                rest.append(index)
                continue
            }
            sendable.append((index, SentWith(projectID: projectID, token: project.token), project.path))
        }
        let connections = transport.leaseFreeStreams(.sole, upTo: sendable.count, precedence: requests.first?.precedence ?? .urgent)
        let now = WallClock.millisecondsSince1970()
        let sends = sendable.map { sendRequest(requests[$0.index], path: $0.path, token: $0.project.token, nowMilliseconds: now) }
        let leased: [Batch.Leased] = zip(sendable, connections).enumerated().map { position, leased in
            (leased.0.index, sends[position], leased.1, leased.0.project)
        }
        let waiting: [Batch.Waiting] = sendable.indices.dropFirst(connections.count).map { position in
            let message = sendable[position]
            return (message.index, sends[position], message.project, FCMSingleSend(index: message.index, refused: nil))
        }
        return (leased, waiting, rest)
    }
}
