import NIOCore
package import NIOHTTP2

/// One HTTP/2 receive window (a stream's or the connection's) of a mock server that handles
/// frames itself: without NIOHTTP2's child channels nothing else sends the WINDOW_UPDATE frames.
package struct HTTP2ReceiveWindow {
    /// The window every stream and the connection start with unless SETTINGS say otherwise.
    package static let protocolDefaultSize = 65_535

    /// What the window is opened up to again once half of it is used.
    package let size: Int
    /// What the client may still send before a WINDOW_UPDATE.
    private var available: Int

    /// A window of `size` bytes that starts with `initial` bytes available (the connection's
    /// window starts at the protocol's 65,535 bytes, whatever the server wants it to be).
    package init(size: Int, initial: Int) {
        self.size = size
        self.available = initial
    }

    /// The bytes a DATA frame takes off the windows: its data and padding.
    package static func flowControlledLength(_ data: HTTP2Frame.FramePayload.Data) -> Int {
        data.data.readableBytes + (data.paddingBytes.map { $0 + 1 } ?? 0)
    }

    /// Takes `length` bytes off the window; returns the increment of the WINDOW_UPDATE to send
    /// when half of it or more is used (the window is then full again), nil otherwise.
    package mutating func consume(_ length: Int) -> Int? {
        available -= length
        guard available <= size / 2 else { return nil }
        defer { available = size }
        return size - available
    }
}
