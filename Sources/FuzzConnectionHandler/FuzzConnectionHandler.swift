// A libFuzzer target: whatever bytes an APNs server (or anything posing as one) sends, the
// connection handler fails the connection or the stream cleanly, never crashes, and answers
// every request exactly once. Each input reaches a handler that is ready with three streams
// open, so the frame reader, HPACK decoding, SETTINGS, flow control, PING, GOAWAY and the
// response bodies all see it.
//
// scripts/test.sh builds it with `-sanitize=fuzzer -DFUZZING` and runs it for a bounded time
// over Fuzz/corpus/connection-handler; in ordinary builds `main` only says so.
@testable import APNSWire
import APNSCore
import Dispatch
import Foundation
import Logging
import NIOCore
import NIOEmbedded
import Synchronization
@testable import HTTP2Transport

#if FUZZING
/// libFuzzer's callback: one input.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzServerBytes(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    ConnectionUnderFuzz.run(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
    return 0
}

/// libFuzzer's driver (compiler-rt, `extern "C"`). SwiftPM links an executable's entry point
/// under its own name on Linux (`--defsym main=…`), which may shadow libFuzzer's `main`: the
/// entry point below starts the driver itself with the same callback.
@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ testOneInput: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

@main
enum FuzzConnectionHandler {
    static func main() {
        var argc = CommandLine.argc
        var argv = CommandLine.unsafeArgv
        exit(
            runFuzzerDriver(&argc, &argv) { data, size in fuzzServerBytes(data, size) }
        )
    }
}
#else
@main
enum FuzzConnectionHandler {
    static func main() {
        print("Build with -Xswiftc -sanitize=fuzzer -Xswiftc -DFUZZING to fuzz (scripts/test.sh does).")
    }
}
#endif

/// One handler on an `EmbeddedChannel`, driven on this thread.
enum ConnectionUnderFuzz {
    static let logger = Logger(label: "fuzz", factory: { _ in SwiftLogNoOpLogHandler() })

    static func run(_ input: [UInt8]) {
        let channel = EmbeddedChannel()
        let ready = channel.eventLoop.makePromise(of: Int.self)
        let handler = APNSConnectionHandler(
            configuration: .init(
                authority: "api.push.apple.com",
                handshakeTimeout: .seconds(10),
                pingInterval: .seconds(60),
                pingTimeout: .seconds(20),
                isTLSFailure: { _ in false }
            ),
            providerToken: "jwt",
            readyPromise: ready,
            logger: logger,
            onEvent: { _ in }
        )
        do {
            try channel.pipeline.syncOperations.addHandler(handler)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443)).wait()
            // The server's SETTINGS (MAX_CONCURRENT_STREAMS 10): the handler is ready.
            try channel.writeInbound(ByteBuffer(bytes: [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 10]))
        } catch {
            fatalError("the harness could not start the handler: \(error)")
        }

        // Three requests waiting for their answers (streams 1, 3 and 5).
        let answered = AnswerCount()
        let finished = DispatchGroup()
        for index in 0..<3 {
            let request = APNSRequest(
                deviceToken: String(repeating: "0\(index)", count: 32),
                topic: "com.example.app",
                pushType: .alert,
                priority: .immediate,
                apnsID: "00000000-0000-0000-0000-00000000000\(index)",
                payload: Array(#"{"aps":{"alert":"fuzz"}}"#.utf8)
            )
            let waiting = WaitingRequest()
            finished.enter()
            Task {
                _ = try? await withCheckedThrowingContinuation { (continuation: CheckedContinuation<APNSStreamOutcome, any Error>) in
                    waiting.handOver(continuation)
                }
                answered.value.add(1, ordering: .relaxed)
                finished.leave()
            }
            handler.startStream(requestID: UInt64(index), request: request, deadline: .now() + .seconds(30), continuation: waiting.take())
        }

        // The input in two reads, split where its first byte says, so frames also arrive cut.
        let split = input.first.map { min(Int($0), input.count) } ?? 0
        for part in [input[..<split], input[split...]] where !part.isEmpty {
            do {
                try channel.writeInbound(ByteBuffer(bytes: part))
            } catch {
                break  // The handler closed the channel: a clean failure.
            }
        }
        _ = try? channel.finish()
        // Timers the handler armed (handshake, deadlines, PING) hold it until they fire or go.
        channel.embeddedEventLoop.advanceTime(by: .hours(1))
        finished.wait()
        precondition(answered.value.load(ordering: .relaxed) == 3, "every request is answered once")
    }
}

/// How many requests got their answer (or error).
final class AnswerCount: Sendable {
    let value = Atomic(0)
}

/// Hands a request's continuation from its task to this thread, which gives it to the handler.
final class WaitingRequest: Sendable {
    private let continuation = Mutex<CheckedContinuation<APNSStreamOutcome, any Error>?>(nil)
    private let handedOver = DispatchSemaphore(value: 0)

    func handOver(_ continuation: CheckedContinuation<APNSStreamOutcome, any Error>) {
        self.continuation.withLock { $0 = continuation }
        handedOver.signal()
    }

    /// Waits for the task to hand its continuation over.
    func take() -> CheckedContinuation<APNSStreamOutcome, any Error> {
        handedOver.wait()
        return continuation.withLock { $0! }
    }
}
