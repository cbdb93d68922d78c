import Foundation

/// CPU time consumed so far by this process, or by its reaped children.
enum CPUTime {
    case thisProcess
    case reapedChildren

    /// User plus system time, in microseconds.
    var microseconds: Int64 {
        var usage = rusage()
        let who = self == .thisProcess ? RUSAGE_SELF : RUSAGE_CHILDREN
        getrusage(__rusage_who_t(who.rawValue), &usage)
        let user = Int64(usage.ru_utime.tv_sec) * 1_000_000 + Int64(usage.ru_utime.tv_usec)
        let system = Int64(usage.ru_stime.tv_sec) * 1_000_000 + Int64(usage.ru_stime.tv_usec)
        return user + system
    }
}

/// What one client did with a batch of requests.
struct ClientRun {
    var requests: Int
    var wallSeconds: Double
    var cpuMicroseconds: Int64

    var requestsPerSecond: Double { Double(requests) / wallSeconds }
    var cpuMicrosecondsPerRequest: Double { Double(cpuMicroseconds) / Double(requests) }

    /// Runs `body`, measuring wall time and the CPU time `cpu` reports around it.
    static func measure(requests: Int, cpu: CPUTime, _ body: () async throws -> Void) async rethrows -> ClientRun {
        let cpuBefore = cpu.microseconds
        let start = ContinuousClock.now
        try await body()
        let seconds = (ContinuousClock.now - start).inSeconds
        return ClientRun(requests: requests, wallSeconds: seconds, cpuMicroseconds: cpu.microseconds - cpuBefore)
    }
}

extension Duration {
    /// The duration in (fractional) seconds.
    var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}

extension Array where Element == Double {
    /// The middle value (the mean of the two middle values for an even count).
    var median: Double {
        precondition(!isEmpty, "median of no values")
        let sorted = self.sorted()
        let middle = sorted.count / 2
        return sorted.count.isMultiple(of: 2) ? (sorted[middle - 1] + sorted[middle]) / 2 : sorted[middle]
    }
}

/// Fixed-width columns for the result tables.
func column(_ value: Double, decimals: Int = 1, width: Int = 12) -> String {
    let text = String(format: "%.\(decimals)f", value)
    return String(repeating: " ", count: max(0, width - text.count)) + text
}
