/// Which requests get a free HTTP/2 stream first when the connection pool has none to spare:
/// every `.urgent` request waiting goes ahead of every `.bulk` one, which wait first-in
/// first-out among themselves. Herald's bulk lane sends `.bulk`; everything else is `.urgent`.
public enum StreamPrecedence: Sendable, Hashable {
    case urgent
    case bulk
}
