import Dispatch
import HeraldService
import Logging
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Finding 12: logging never waits for the log pipe. Before, each line was written to standard
/// error by the thread that logged, so a stalled log pipe stalled the NIO event loops that carry
/// the APNs connections (their outcomes are logged where they arrive).
@Suite(.timeLimit(.minutes(1)))
struct LogLineWriterTests {
    @Test func aStalledLogPipeNeverBlocksTheLoggingThreadAndLossIsReported() async throws {
        var descriptors: [Int32] = [0, 0]
        #expect(pipe(&descriptors) == 0)
        let (readEnd, writeEnd) = (descriptors[0], descriptors[1])
        defer { close(readEnd) }
        let writer = LogLineWriter(fileDescriptor: writeEnd, capacity: 100)
        let logger = Logger(label: "test") { label in LineLogHandler(label: label, level: .info, format: .json, writer: writer) }
        // About 2.4 MB while nobody reads: far past the pipe's buffer (64 KiB on Linux), logged
        // on a thread of its own, which must come back within seconds.
        let logged = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            for index in 0..<20_000 { logger.info("line \(index) \(String(repeating: "x", count: 100))") }
            logged.signal()
        }
        let returned = await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: logged.wait(timeout: .now() + .seconds(10)) == .success) }
        }
        guard returned else {
            Issue.record("the logging thread waited for the log pipe")
            // Let it out: read until it has written everything.
            DispatchQueue.global().async {
                var buffer = [UInt8](repeating: 0, count: 65_536)
                while read(readEnd, &buffer, buffer.count) > 0 {}
            }
            await withCheckedContinuation { continuation in
                DispatchQueue.global().async {
                    logged.wait()
                    continuation.resume()
                }
            }
            close(writeEnd)
            return
        }
        #expect(writer.droppedCount > 0, "lines past the capacity are dropped, not waited for")
        // Reading lets the backlog out, then the line that says how many were lost.
        let output = await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                var text = ""
                var buffer = [UInt8](repeating: 0, count: 65_536)
                while !text.contains("log lines dropped") {
                    let count = read(readEnd, &buffer, buffer.count)
                    guard count > 0 else { break }
                    text += String(decoding: buffer[..<count], as: UTF8.self)
                }
                continuation.resume(returning: text)
            }
        }
        writer.flush()
        close(writeEnd)
        #expect(output.hasPrefix(#"{"ts":"#))
        #expect(output.contains(#""msg":"line 0 "#))
        #expect(output.contains("log lines dropped"))
    }
}
