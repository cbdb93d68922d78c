import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes log lines to a file descriptor (standard error) on a serial dispatch queue of its
/// own, so the thread that logs never waits for the log pipe: not a NIO event loop carrying
/// APNs connections, not the cooperative pool. At most `capacity` lines wait; past that, lines
/// are dropped and counted, and once the backlog is written a line says how many were lost.
package final class LogLineWriter: Sendable {
    /// The process's standard error.
    package static let standardError = LogLineWriter(fileDescriptor: 2)

    private let fileDescriptor: Int32
    private let capacity: Int
    private let queue = DispatchQueue(label: "herald.log-lines")
    private let waiting = Atomic(0)
    private let dropped = Atomic(0)

    package init(fileDescriptor: Int32, capacity: Int = 10_000) {
        self.fileDescriptor = fileDescriptor
        self.capacity = capacity
    }

    /// Lines dropped so far because `capacity` lines were waiting.
    package var droppedCount: Int { dropped.load(ordering: .relaxed) }

    /// Queues `line` (newline included) and returns at once.
    package func write(_ line: String) {
        guard waiting.add(1, ordering: .relaxed).newValue <= capacity else {
            waiting.subtract(1, ordering: .relaxed)
            dropped.add(1, ordering: .relaxed)
            return
        }
        queue.async {
            self.writeAll(line)
            if self.waiting.subtract(1, ordering: .relaxed).newValue == 0 {
                let lost = self.dropped.exchange(0, ordering: .relaxed)
                if lost > 0 { self.writeAll("herald: \(lost) log lines dropped: the log pipe was \(self.capacity) lines behind\n") }
            }
        }
    }

    /// Returns once every line queued before the call is written.
    package func flush() {
        queue.sync {}
    }

    private func writeAll(_ line: String) {
        var line = line
        line.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = writeBytes(fileDescriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    return  // The log is gone (a closed pipe): nothing to write to.
                }
                offset += written
            }
        }
    }
}

/// write(2), named apart from ``LogLineWriter/write(_:)``.
private func writeBytes(_ fileDescriptor: Int32, _ bytes: UnsafePointer<UInt8>, _ count: Int) -> Int {
    write(fileDescriptor, bytes, count)
}
