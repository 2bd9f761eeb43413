"""Asks the Vulkan loader for its version and physical devices through the Vulkan API itself (ctypes),
for machines without vulkaninfo (vulkan-tools). Runs as a child process, so that a faulty driver cannot
take detection down; imports nothing from ``playbook``.

Prints one JSON object: {"instance_version": "1.3.239", "devices": [{"name", "type", "api_version",
"driver_version", "vendor_id", "driver_name", "driver_info"}]} or {"error": "..."}.
"""

import ctypes
import json
import sys

LIBRARIES = {"win32": ["vulkan-1.dll"], "darwin": ["libvulkan.1.dylib", "libMoltenVK.dylib"]}
TYPES = {0: "other", 1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}
STYPE_APPLICATION_INFO, STYPE_INSTANCE_CREATE_INFO = 0, 1
STYPE_PROPERTIES_2, STYPE_DRIVER_PROPERTIES = 1000059001, 1000196000
API_1_1 = (1 << 22) | (1 << 12)


class ApplicationInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("pApplicationName", ctypes.c_char_p),
                ("applicationVersion", ctypes.c_uint32), ("pEngineName", ctypes.c_char_p),
                ("engineVersion", ctypes.c_uint32), ("apiVersion", ctypes.c_uint32)]


class InstanceCreateInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                ("pApplicationInfo", ctypes.POINTER(ApplicationInfo)), ("enabledLayerCount", ctypes.c_uint32),
                ("ppEnabledLayerNames", ctypes.c_void_p), ("enabledExtensionCount", ctypes.c_uint32),
                ("ppEnabledExtensionNames", ctypes.c_void_p)]


class DeviceProperties(ctypes.Structure):
    # VkPhysicalDeviceProperties up to the UUID; the limits and sparse properties that follow (524 bytes on
    # 64-bit) land in the padding.
    _fields_ = [("apiVersion", ctypes.c_uint32), ("driverVersion", ctypes.c_uint32), ("vendorID", ctypes.c_uint32),
                ("deviceID", ctypes.c_uint32), ("deviceType", ctypes.c_int), ("deviceName", ctypes.c_char * 256),
                ("pipelineCacheUUID", ctypes.c_uint8 * 16), ("rest", ctypes.c_uint8 * 2048)]


class DriverProperties(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("driverID", ctypes.c_int),
                ("driverName", ctypes.c_char * 256), ("driverInfo", ctypes.c_char * 256),
                ("conformanceVersion", ctypes.c_uint8 * 4)]


class Properties2(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("properties", DeviceProperties)]


def version(value: int) -> str:
    return f"{(value >> 22) & 0x7F}.{(value >> 12) & 0x3FF}.{value & 0xFFF}"


def load():
    errors = []
    for name in LIBRARIES.get(sys.platform, ["libvulkan.so.1", "libvulkan.so"]):
        try:
            return ctypes.CDLL(name)
        except OSError as err:
            errors.append(str(err))
    raise OSError("; ".join(errors))


def main() -> dict:
    try:
        vk = load()
    except OSError as err:
        return {"error": f"no Vulkan loader: {err}"}
    instance_version = ctypes.c_uint32(1 << 22)
    if hasattr(vk, "vkEnumerateInstanceVersion"):
        vk.vkEnumerateInstanceVersion(ctypes.byref(instance_version))
    app = ApplicationInfo(STYPE_APPLICATION_INFO, None, b"llama-cpp-playbook", 1, b"none", 1,
                          API_1_1 if instance_version.value >= API_1_1 else 1 << 22)
    create = InstanceCreateInfo(STYPE_INSTANCE_CREATE_INFO, None, 0, ctypes.pointer(app), 0, None, 0, None)
    instance = ctypes.c_void_p()
    result = vk.vkCreateInstance(ctypes.byref(create), None, ctypes.byref(instance))
    if result != 0:
        return {"instance_version": version(instance_version.value), "error": f"vkCreateInstance returned {result}"}
    count = ctypes.c_uint32(0)
    vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
    handles = (ctypes.c_void_p * count.value)()
    vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), handles)
    get_proc = vk.vkGetInstanceProcAddr
    get_proc.restype = ctypes.c_void_p
    address = get_proc(instance, b"vkGetPhysicalDeviceProperties2") if app.apiVersion >= API_1_1 else None
    devices = []
    for handle in handles[: count.value]:
        driver = DriverProperties(STYPE_DRIVER_PROPERTIES, None)
        props = Properties2(STYPE_PROPERTIES_2, ctypes.cast(ctypes.pointer(driver), ctypes.c_void_p))
        if address:
            ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(Properties2))(address)(handle, ctypes.byref(props))
        else:
            vk.vkGetPhysicalDeviceProperties(ctypes.c_void_p(handle), ctypes.byref(props.properties))
        p = props.properties
        devices.append({"name": p.deviceName.decode(errors="replace"), "type": TYPES.get(p.deviceType, "other"),
                        "api_version": version(p.apiVersion), "driver_version": p.driverVersion,
                        "vendor_id": f"0x{p.vendorID:x}", "driver_name": driver.driverName.decode(errors="replace"),
                        "driver_info": driver.driverInfo.decode(errors="replace")})
    vk.vkDestroyInstance(instance, None)
    return {"instance_version": version(instance_version.value), "devices": devices}


if __name__ == "__main__":
    print(json.dumps(main()))
