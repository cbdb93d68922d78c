import Synchronization

/// The permanent errors holding operations right now, each with how many it holds: a publish
/// refused by the broker for good, a statement PostgreSQL refuses. The first hold of a cause
/// and its last release are what the caller logs; while any is held, Herald is unready.
final class BlockingCauses: Sendable {
    private let heldByCause = Mutex<[String: Int]>([:])

    /// The causes holding at least one operation, sorted.
    var causes: [String] { heldByCause.withLock { $0.keys.sorted() } }

    /// Counts one more operation held by `cause`; true when it is the cause's first.
    func hold(_ cause: String) -> Bool {
        heldByCause.withLock { counts in
            counts[cause, default: 0] += 1
            return counts[cause] == 1
        }
    }

    /// Counts one operation less held by `cause`; true when the cause holds none any more.
    func release(_ cause: String) -> Bool {
        heldByCause.withLock { counts in
            counts[cause, default: 1] -= 1
            guard counts[cause] == 0 else { return false }
            counts[cause] = nil
            return true
        }
    }
}
