package deploy_test

// The Prometheus Operator's kinds, as far as the manifests and the docs use
// them. Its Go module is not worth its dependencies here; these types name
// only fields that monitoring.coreos.com/v1 has (prometheus-operator's
// pkg/apis/monitoring/v1), so decoding into them strictly refuses a field
// that is misspelt or that these types do not know yet: add it here, as
// the CRD spells it.

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// podMonitor is monitoring.coreos.com/v1 PodMonitor.
type podMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              podMonitorSpec `json:"spec"`
}

type podMonitorSpec struct {
	JobLabel            string                   `json:"jobLabel,omitempty"`
	PodTargetLabels     []string                 `json:"podTargetLabels,omitempty"`
	PodMetricsEndpoints []podMetricsEndpoint     `json:"podMetricsEndpoints"`
	Selector            metav1.LabelSelector     `json:"selector"`
	NamespaceSelector   monitorNamespaceSelector `json:"namespaceSelector,omitempty"`
}

type monitorNamespaceSelector struct {
	Any        bool     `json:"any,omitempty"`
	MatchNames []string `json:"matchNames,omitempty"`
}

type podMetricsEndpoint struct {
	Port              string          `json:"port,omitempty"`
	Path              string          `json:"path,omitempty"`
	Scheme            string          `json:"scheme,omitempty"`
	Interval          string          `json:"interval,omitempty"`
	ScrapeTimeout     string          `json:"scrapeTimeout,omitempty"`
	HonorLabels       bool            `json:"honorLabels,omitempty"`
	Relabelings       []relabelConfig `json:"relabelings,omitempty"`
	MetricRelabelings []relabelConfig `json:"metricRelabelings,omitempty"`
}

type relabelConfig struct {
	SourceLabels []string `json:"sourceLabels,omitempty"`
	Separator    string   `json:"separator,omitempty"`
	TargetLabel  string   `json:"targetLabel,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	Modulus      uint64   `json:"modulus,omitempty"`
	Replacement  string   `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

// DeepCopyObject makes podMonitor a runtime.Object, for the decoder; the
// tests never copy one.
func (p *podMonitor) DeepCopyObject() runtime.Object { c := *p; return &c }

// prometheusRule is monitoring.coreos.com/v1 PrometheusRule.
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

type ruleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []rule `json:"rules"`
}

type rule struct {
	Record      string             `json:"record,omitempty"`
	Alert       string             `json:"alert,omitempty"`
	Expr        intstr.IntOrString `json:"expr"`
	For         string             `json:"for,omitempty"`
	Labels      map[string]string  `json:"labels,omitempty"`
	Annotations map[string]string  `json:"annotations,omitempty"`
}

// DeepCopyObject makes prometheusRule a runtime.Object, for the decoder.
func (p *prometheusRule) DeepCopyObject() runtime.Object { c := *p; return &c }
