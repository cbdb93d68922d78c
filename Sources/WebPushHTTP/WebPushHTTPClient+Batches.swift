// WebPushHTTPClient+Batches.swift: a batch of Web Push messages started as one
// `HTTP2StreamBatch`, as APNs' and FCM's are.

import HTTP2TLS
import PushCore
public import WebPushCore
import Foundation
import NIOCore
import HTTP2Transport

/// A batch of messages started as one ``HTTP2StreamBatch``: the streams free now are leased in
/// one lock section per origin, each connection gets its share in one hop to its event loop, the
/// rest wait in their origin's pool for a stream, and the answers are read and handed to the
/// caller there, with no task or continuation per message.
extension WebPushHTTPClient {
    /// Sends every request, calling `answered` on the connections' event loops; a message that
    /// finds no free stream waits in its origin's pool without a task and starts where a stream
    /// is freed. What cannot take that path (a refused host, no VAPID key, a message that cannot
    /// be encrypted, no stream before the deadline, a stream that could not be opened) goes
    /// through ``send(_:deadline:)`` in a child task, which answers or fails it as for a single
    /// message.
    public func sendAll(
        _ requests: [WebPushRequest],
        deadline: ContinuousClock.Instant,
        answered: @escaping @Sendable (Int, Result<WebPushResponse, any Error>) -> Void
    ) async {
        // A batch comes from one lane: its first request's precedence is every request's.
        let precedence = requests.first?.precedence ?? .urgent
        // Past the deadline or cancelled: the single path says so per request.
        let nioDeadline = Task.isCancelled ? nil : NIODeadline.fromContinuousClock(deadline)
        let (leased, waiting, alone) =
            nioDeadline == nil
            ? ([], [], Array(requests.indices))
            : leaseFreeStreams(for: requests, prepared: await prepareAll(requests), precedence: precedence)
        let (deadlineOfStreams, sentAt) = (nioDeadline ?? .now(), ContinuousClock.now)
        let pools = Batch.Pools(
            wait: { waiters in
                self.transport.wait(waiters.map { (endpoint: $0.context, waiter: $0.waiter) }, deadline: deadlineOfStreams, precedence: precedence)
            },
            stopWaiting: { waiters in self.transport.stopWaiting(waiters.map { (endpoint: $0.context, id: $0.id) }) }
        )
        await Batch.send(leased, waiting: waiting, deadline: deadlineOfStreams, alone: alone, pools: pools) { stream, result in
            self.transport.release(stream.connection, status: try? result.get().status)
            switch result {
            case .success(let response):
                self.record(response, from: stream.context, sentAt: sentAt)
                answered(stream.index, .success(response))
            case .failure(is HTTP2StreamNotOpened):
                return stream.index
            case .failure(let error):
                let failure = self.failure(error, sentAt: sentAt, deadline: deadline)
                // Reset because the caller was cancelled: as the single path, a cancellation.
                answered(stream.index, .failure(error is CancellationError && ContinuousClock.now < deadline ? error : failure))
            }
            return nil
        } retry: { index in
            do {
                answered(index, .success(try await self.send(requests[index], deadline: deadline)))
            } catch {
                answered(index, .failure(error))
            }
        }
    }

    /// A stream's context is its origin (the pool it waits in); a request to send again through
    /// the single path is its index.
    private typealias Batch = HTTP2StreamBatch<WebPushConnection, WebPushOrigin, Int>

    /// Each request checked, signed and encrypted (``prepare(_:nowMilliseconds:)``), nil for one
    /// that cannot be (the single path says why).
    ///
    /// A batch's encryption runs in parallel on Swift's global executor, in one chunk per core:
    /// an ECDH and a key generation per message are most of a browser's cost, and on the
    /// caller's executor (`herald run`'s pipeline event loop) they held one core while the other
    /// idled (BENCHMARKS.md, "pipeline burst, a third of the devices browsers").
    private func prepareAll(_ requests: [WebPushRequest]) async -> [(origin: WebPushOrigin, request: WebPushSendRequest)?] {
        let now = WallClock.millisecondsSince1970()
        let chunks = min(ProcessInfo.processInfo.activeProcessorCount, requests.count / Self.messagesPerChunk)
        guard chunks > 1 else { return requests.map { try? prepare($0, nowMilliseconds: now) } }
        let chunkSize = (requests.count + chunks - 1) / chunks
        return await withTaskGroup(of: (Int, [(origin: WebPushOrigin, request: WebPushSendRequest)?]).self) { group in
            for start in stride(from: 0, to: requests.count, by: chunkSize) {
                group.addTask(executorPreference: globalConcurrentExecutor) {
                    (start, requests[start..<min(start + chunkSize, requests.count)].map { try? self.prepare($0, nowMilliseconds: now) })
                }
            }
            var prepared = [(origin: WebPushOrigin, request: WebPushSendRequest)?](repeating: nil, count: requests.count)
            for await (start, chunk) in group {
                prepared.replaceSubrange(start..<start + chunk.count, with: chunk)
            }
            return prepared
        }
    }

    /// The fewest messages worth a chunk of their own: below it, a task costs more than it saves.
    private static var messagesPerChunk: Int { 8 }

    /// Each prepared message with a stream of its origin as far as streams are free (one lock
    /// section per origin), else to wait for one; the indexes of the rest.
    private func leaseFreeStreams(
        for requests: [WebPushRequest],
        prepared: [(origin: WebPushOrigin, request: WebPushSendRequest)?],
        precedence: StreamPrecedence
    ) -> (leased: [Batch.Leased], waiting: [Batch.Waiting], alone: [Int]) {
        var byOrigin: [WebPushOrigin: [(index: Int, request: WebPushSendRequest)]] = [:]
        var alone: [Int] = []
        for index in requests.indices {
            // The single path throws what stopped it here.
            guard let prepared = prepared[index] else {
                alone.append(index)
                continue
            }
            byOrigin[prepared.origin, default: []].append((index, prepared.request))
        }
        var leased: [Batch.Leased] = []
        var waiting: [Batch.Waiting] = []
        for (origin, sends) in byOrigin {
            let connections = transport.leaseFreeStreams(origin, upTo: sends.count, precedence: precedence)
            leased += zip(sends, connections).map { send, connection -> Batch.Leased in (send.index, send.request, connection, origin) }
            waiting += sends.dropFirst(connections.count).map { send -> Batch.Waiting in (send.index, send.request, origin, send.index) }
        }
        return (leased, waiting, alone)
    }
}
