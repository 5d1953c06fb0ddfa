package sysfs

// baseClassNames names the PCI base classes (the first byte of the class
// code) as the PCI Code and ID Assignment specification groups them. It is
// built in so that class names never depend on a PCI ID database.
var baseClassNames = map[string]string{
	"00": "Unclassified device",
	"01": "Mass storage controller",
	"02": "Network controller",
	"03": "Display controller",
	"04": "Multimedia controller",
	"05": "Memory controller",
	"06": "Bridge",
	"07": "Communication controller",
	"08": "Generic system peripheral",
	"09": "Input device controller",
	"0a": "Docking station",
	"0b": "Processor",
	"0c": "Serial bus controller",
	"0d": "Wireless controller",
	"0e": "Intelligent controller",
	"0f": "Satellite communications controller",
	"10": "Encryption controller",
	"11": "Signal processing controller",
	"12": "Processing accelerators",
	"13": "Non-essential instrumentation",
	"40": "Coprocessor",
	"ff": "Unassigned class",
}

// subclassNames names the subclasses (the first two bytes of the class
// code) a device plugin meets most; the PCI ID database, when loaded, names
// the others.
var subclassNames = map[string]string{
	"0100": "SCSI storage controller",
	"0101": "IDE interface",
	"0104": "RAID bus controller",
	"0106": "SATA controller",
	"0107": "Serial Attached SCSI controller",
	"0108": "Non-Volatile memory controller",
	"0200": "Ethernet controller",
	"0207": "InfiniBand controller",
	"0208": "Fabric controller",
	"0280": "Network controller",
	"0300": "VGA compatible controller",
	"0302": "3D controller",
	"0380": "Display controller",
	"0480": "Multimedia controller",
	"0580": "Memory controller",
	"0600": "Host bridge",
	"0601": "ISA bridge",
	"0604": "PCI bridge",
	"0880": "System peripheral",
	"0b40": "Co-processor",
	"0c03": "USB controller",
	"0c05": "SMBus",
	"1000": "Network and computing encryption device",
	"1080": "Encryption controller",
	"1200": "Processing accelerators",
	"1201": "SDXI controller",
}

// className returns the names of the base class and the subclass of class
// (six hex digits), "" for what it does not know.
func className(class string, db *idDB) (base, sub string) {
	if len(class) != 6 {
		return "", ""
	}
	base = baseClassNames[class[:2]]
	if db != nil {
		sub = db.subclasses[class[:4]]
	}
	if sub == "" {
		sub = subclassNames[class[:4]]
	}
	return base, sub
}
